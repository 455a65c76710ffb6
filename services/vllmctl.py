"""``./start_vllm.sh``: start or restart only vLLM, with ``VLLM_MODEL_PATH`` (the seed image's name) or ``MODEL``.

In local mode the other services keep running (the chat UI's header follows the new model by itself); with the
compose stack only the ``vllm`` service is recreated; with no stack running, ``make up`` starts everything with that
model. The model is resolved before anything is stopped, so a typo never takes the running vLLM down.
``VLLM_EXTRA_ARGS='--max-num-seqs 4' ./start_vllm.sh`` restarts it with other vLLM flags (given, even empty, they
replace the stack's; not given, vLLM starts with the stack's own), e.g. for ``make compare`` of one flag.
Exit status: 0 when vLLM answers with the model, 1 when it did not come up, 2 for a model that cannot be served.
"""

from __future__ import annotations

import argparse
import sys

from core.cli import build_parser, parse
from core.engine import EngineError, EngineRequest
from core.settings import Settings
from services import stackctl
from services.vllm.control import ComposeEngine, LocalEngine
from services.vllm.launch import resolve
from services.vllm.model_resolve import ModelResolutionError


def parser() -> argparse.ArgumentParser:
    """Every knob as a flag (``--vllm-model-path DIR``, ``--model-timeout``...), as for the benchmark."""
    return build_parser("./start_vllm.sh", __doc__ or "")


def switch(settings: Settings) -> int:
    """Restart vLLM with the configured model wherever the stack runs (see the module docstring)."""
    try:
        resolved = resolve(settings)  # fails fast: unknown folder, typo on the hub, unknown synthetic variant
    except ModelResolutionError as exc:
        print(f"[ERROR] {exc}", file=sys.stderr)
        return 2
    # VLLM_EXTRA_ARGS given to this command (even empty) replaces the stack's: `VLLM_EXTRA_ARGS='--max-num-seqs 4'`
    extra = settings.vllm_extra_args if "vllm_extra_args" in settings.model_fields_set else None
    request = EngineRequest(model=settings.model or None, vllm_extra_args=extra)
    for engine in (LocalEngine(settings), ComposeEngine(settings)):
        if engine.status() is None:
            continue
        where = "the local stack" if isinstance(engine, LocalEngine) else "the compose stack"
        print(f"[INFO] Restarting vLLM in {where} with {resolved.requested} (served as {resolved.served_name})...")
        try:
            engine.restart(request)
        except EngineError as exc:
            print(f"[ERROR] vLLM did not come back: {exc}", file=sys.stderr)
            return 1
        print(f"[INFO] vLLM ready at {settings.vllm_url} serving {resolved.served_name}; nothing else was restarted")
        return 0
    print(f"[INFO] No stack is running: starting it (make up) with {resolved.requested}.")
    return stackctl.up(settings)


def main(argv: list[str] | None = None) -> int:
    """CLI entry."""
    _, settings = parse(parser(), argv)
    return switch(settings)


if __name__ == "__main__":
    raise SystemExit(main())
