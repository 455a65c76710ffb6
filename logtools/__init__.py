"""Log analyzer for ``logs/vllm.log`` and ``logs/requests.jsonl``: errors, slow requests, stats.

Run as ``python -m logtools --errors|--slow|--stats [--json] [--since 1h]`` (see :mod:`.cli`). The
``--errors`` path imports only the standard library (no pydantic, argparse, pathlib or dataclasses) and scans bytes,
so a 45 MB log takes ~0.08 s of CPU (within 10x ``grep -c ERROR``, ``benchmarks/bench_log_analyzer.py``); the
settings (~0.3 s to import) are read only when no ``--log``/``--requests`` is given. vLLM's start-up phase is
:func:`engine.vllmlog.startup.startup_phase`.
"""
