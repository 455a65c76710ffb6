"""``make benchmark PROFILE=1``: the measured window under vLLM's torch profiler (traces in ``logs/profile/``).
The engine controller restarts vLLM with its profiler and back; elsewhere vLLM must run with ``--profiler-config``."""

from __future__ import annotations

import httpx

from core.enginestate import EngineControl, EngineError, read_engine_state
from core.replicas import engine_url
from core.settings import Settings

TRACE_SUFFIXES = (".json", ".json.gz")


class ProfilingError(RuntimeError):
    """The profiler cannot be used; the message says why and what to do."""


def enable_profiler(settings: Settings, engine: EngineControl) -> None:
    """Make sure vLLM runs with its profiler: the launcher started it with one (``logs/engine_state.json``), else a
    restart with it (undo with :func:`disable_profiler`). Raises ProfilingError: no controller runs the engine and
    vLLM has no profiler, or the restart failed."""
    state = read_engine_state(settings.engine_state_file)
    if state is not None and state.profiler:
        return
    try:
        status = engine.status()
    except EngineError as exc:  # supervisord not answering
        raise ProfilingError(f"cannot see vLLM's process: {exc}") from None
    if status is None:
        raise ProfilingError("PROFILE=1 needs vLLM started with --profiler-config: in local mode `make up` first; with "
                             'compose set VLLM_EXTRA_ARGS=\'--profiler-config {"profiler":"torch",'
                             '"torch_profiler_dir":"/app/logs/profile"}\'')
    print("[INFO] Restarting vLLM with its torch profiler for this run (switching back afterwards)...", flush=True)
    try:
        engine.restart(status.request.model_copy(update={"profiler": True}))
    except EngineError as exc:
        raise ProfilingError(f"vLLM with profiler did not start: {exc}") from None


def disable_profiler(settings: Settings, engine: EngineControl) -> None:
    """Restart vLLM without the profiler when the controller started it with one (no controller: nothing)."""
    try:
        status = engine.status()
    except EngineError as exc:  # supervisord not answering
        print(f"[WARN] vLLM may still run with its profiler: {exc}", flush=True)
        return
    if status is None or not status.request.profiler:
        return
    print("[INFO] Restarting vLLM without the profiler...", flush=True)
    try:
        engine.restart(status.request.model_copy(update={"profiler": False}))
    except EngineError as exc:
        print(f"[WARN] vLLM did not come back without the profiler: {exc}", flush=True)


def profiler_post(settings: Settings, path: str, timeout_s: float) -> None:
    """``POST path`` to vLLM itself (``/start_profile``, ``/stop_profile``), within ``timeout_s`` s. Raises
    ProfilingError: no answer, or not HTTP 200."""
    try:
        url = engine_url(settings)  # vLLM itself: the router in front does not pass the profiler endpoints on
        response = httpx.post(f"{url}{path}", timeout=timeout_s, headers=settings.vllm_headers)
    except httpx.HTTPError as exc:
        raise ProfilingError(f"POST {path} failed: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise ProfilingError(f"POST {path} answered HTTP {response.status_code}: {response.text[:300]}")
