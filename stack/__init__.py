"""Entry points of the stack: ``make up|down|status`` (:mod:`stack.control`) and ``./start_vllm.sh``
(:mod:`stack.engine_switch`)."""
