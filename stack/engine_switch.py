"""``./start_vllm.sh``: replace only vLLM, with ``VLLM_MODEL_PATH`` (the seed image's name) or ``MODEL``.

In local mode the other services keep running and, by default, so does the old engine until the new one answers (a
blue/green switch behind the router, :mod:`engine.bluegreen`: no request refused, none cut within
SWITCH_DRAIN_TIMEOUT_S). Where the host cannot hold both engines, or with ``ENGINE_SWITCH=restart``, it says so with
the expected downtime, then stops vLLM and starts the new one (``ENGINE_SWITCH=blue-green`` forces side by side).
With the compose stack only the ``vllm`` service is recreated; with no stack, ``make up`` starts everything with that
model. The model is resolved before anything stops, so a typo never takes vLLM down. VLLM_EXTRA_ARGS and the engine
knobs (``--kv-cache-gb 4``, ``--max-model-len 2048``, ``--dtype float32`` …) given to it replace the stack's
(``run/engine_request.json``). Exit status: 0 when vLLM answers with the model, 1 when it did not come up, 2 for a
model that cannot be served or a switch that cannot be done as asked.
"""

from __future__ import annotations

import argparse
import os
import shlex
import time
from collections.abc import Collection, Mapping

from core.enginestate import ENGINE_KNOBS, EngineError, EngineRequest
from core.flags import build_parser, env_names, given, parse
from core.knobs.commands import ENGINE
from core.redact import split_secret_flags
from core.replicas import front_in_use
from core.settings import Settings
from engine.bluegreen import decide, room_now
from engine.engineplan import engine_build, fits_host
from engine.kvsizing import KvSizingError, for_host
from engine.launcher import kv_plan, resolve
from engine.local_control import ComposeEngine, LocalEngine, engine_phase
from engine.model_resolve import ModelResolutionError
from stack import control as stackctl


def parser() -> argparse.ArgumentParser:
    """The engine's knobs as flags (``--kv-cache-gb 4`` …: :data:`core.knobs.commands.ENGINE`)."""
    return build_parser("./start_vllm.sh", __doc__ or "", ENGINE)


def engine_request(
    settings: Settings, flags: Collection[str] = (), environ: Mapping[str, str] | None = None
) -> EngineRequest:
    """What the switch asks of the launcher: the model, the engine knobs named in ``flags`` or set in
    ``environ`` (default this process's), and VLLM_EXTRA_ARGS when given (even empty)."""
    env = os.environ if environ is None else environ
    extra = settings.vllm_extra_args if "vllm_extra_args" in settings.model_fields_set else None
    knobs = {
        name: getattr(settings, name)
        for name in ENGINE_KNOBS
        if getattr(settings, name) is not None
        and (name in flags or any(var in env for var in env_names(name, Settings.model_fields[name])))
    }
    return EngineRequest(model=settings.model or None, vllm_extra_args=extra, knobs=knobs)


def switch(settings: Settings, flags: Collection[str] = ()) -> int:
    """Restart vLLM with the configured model wherever the stack runs; ``flags``: the knobs given."""
    try:
        resolved = resolve(settings)  # fails fast: unknown folder, typo on the hub, unknown synthetic variant
    except ModelResolutionError as exc:
        return stackctl.failed(2, str(exc))
    build = engine_build(settings)
    planned, _ = for_host(settings, build)  # the dtype (and so the pool) the launcher will choose
    try:
        kv_plan(planned, resolved)  # KV_CACHE_GB and VLLM_MAX_MODEL_LEN fit, before the running vLLM is stopped
        fits_host(planned, build)  # and the CPU build's pool fits this host's memory
    except KvSizingError as exc:
        return stackctl.failed(2, str(exc))
    # VLLM_EXTRA_ARGS given to this command (even empty) replaces the stack's: `VLLM_EXTRA_ARGS='--max-num-seqs 4'`
    request = engine_request(settings, flags)
    extra = request.vllm_extra_args
    if extra:
        try:
            secret = split_secret_flags(shlex.split(extra))[1]
        except ValueError as exc:
            return stackctl.failed(2, f"VLLM_EXTRA_ARGS does not parse ({exc}): quote it as a shell would.")
        if secret:  # never written to run/engine_request.json
            print(
                "[INFO] --api-key and other secret flags of VLLM_EXTRA_ARGS stay those vLLM was started with by "
                "`make up` (VLLM_API_KEY, .env); the other flags apply."
            )
    for engine in (LocalEngine(settings), ComposeEngine(settings)):
        try:
            if engine.status() is None:
                continue
        except EngineError as exc:  # supervisord not answering: whether vLLM runs is unknown
            return stackctl.failed(1, str(exc))
        local = isinstance(engine, LocalEngine)
        where = "the local stack" if local else "the compose stack"
        room = room_now(planned, resolved, build) if local else None
        decision = decide(settings.engine_switch, front_in_use(settings) if local else None, room,
                          engine_phase(settings).startup_s)  # fmt: skip
        print(f"[{'ERROR' if decision.how == 'refuse' else 'INFO'}] {decision.why}", flush=True)
        if decision.how == "refuse":
            return 2
        if isinstance(engine, LocalEngine) and decision.how == "blue-green":
            return blue_green(settings, engine, request, resolved.requested, resolved.served_name)
        print(f"[INFO] Restarting vLLM in {where} with {resolved.requested} (served as {resolved.served_name})...")
        try:
            engine.restart(request)
        except EngineError as exc:
            return stackctl.failed(1, f"vLLM did not come back: {exc}")
        print(f"[INFO] vLLM ready at {settings.vllm_url} serving {resolved.served_name}; nothing else was restarted")
        return 0
    print(f"[INFO] No stack is running: starting it (make up) with {resolved.requested}.")
    return stackctl.up(settings, request)


def blue_green(settings: Settings, engine: LocalEngine, request: EngineRequest, requested: str, served: str) -> int:
    """Switch every local engine blue/green (:meth:`engine.local_control.LocalEngine.switch`): 0 when the
    new engines serve, 1 when one did not come up (the old one serves on)."""
    print(f"[INFO] Switching vLLM in the local stack to {requested} (served as {served}) beside the running engine; "
          "it keeps serving until the new one answers...", flush=True)  # fmt: skip
    begun = time.monotonic()
    try:
        swaps = engine.switch(request, lambda line: print(line, flush=True))
    except EngineError as exc:
        return stackctl.failed(1, f"The new vLLM did not come up; the running one keeps serving: {exc}")
    cut = sum(s.drained.cut for s in swaps)
    gap = max((s.swap_s for s in swaps), default=0.0)
    print(f"[INFO] vLLM ready at {settings.vllm_url} serving {served} {time.monotonic() - begun:.1f} s after the "
          f"command; the router swapped engines in {gap * 1000:.0f} ms, "
          + (f"{cut} request(s) cut at the drain timeout" if cut else "the swap refused or cut no request")
          + "; nothing else was restarted")  # fmt: skip
    print(
        f"[INFO] Requests naming another model than {served} now get HTTP 404 (model does not exist): the chat UI "
        "follows the switch; a benchmark started before it ends early (exit 6, its report marks the switch)."
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """CLI entry."""
    args, settings = parse(parser(), argv)
    return switch(settings, set(given(args)))


if __name__ == "__main__":
    raise SystemExit(main())
