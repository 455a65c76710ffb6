"""``make benchmark PROFILE=1``: the measured window under vLLM's torch profiler (traces in ``logs/profile/``).
The engine controller restarts vLLM with its profiler and back; elsewhere vLLM must run with ``--profiler-config``."""

from __future__ import annotations

from pathlib import Path

import httpx

from core.enginestate import EngineControl, EngineError, read_engine_state
from core.replicas import engine_url
from core.settings import Settings

TRACE_SUFFIXES = (".json", ".json.gz")


class ProfilingError(RuntimeError):
    """The profiler cannot be used; the message says why and what to do."""


def engine_has_profiler(settings: Settings) -> bool:
    """True when the launcher started vLLM with its profiler endpoints (``logs/engine_state.json``)."""
    state = read_engine_state(settings.engine_state_file)
    return state is not None and state.profiler


def enable(settings: Settings, engine: EngineControl) -> bool:
    """Make sure vLLM runs with its profiler; True when it was restarted (undo with :func:`disable`). Raises
    ProfilingError: no controller runs the engine and vLLM has no profiler, or the restart failed."""
    if engine_has_profiler(settings):
        return False
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
    return True


def disable(settings: Settings, engine: EngineControl) -> None:
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


def _post(settings: Settings, path: str, timeout_s: float) -> None:
    try:
        url = engine_url(settings)  # vLLM itself: the router in front does not pass the profiler endpoints on
        response = httpx.post(f"{url}{path}", timeout=timeout_s, headers=settings.vllm_headers)
    except httpx.HTTPError as exc:
        raise ProfilingError(f"POST {path} failed: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise ProfilingError(f"POST {path} answered HTTP {response.status_code}: {response.text[:300]}")


def start(settings: Settings) -> None:
    """Start recording (``POST /start_profile``)."""
    _post(settings, "/start_profile", 60)


def stop(settings: Settings) -> None:
    """Stop recording and let vLLM write its traces (``POST /stop_profile``; can take a while)."""
    _post(settings, "/stop_profile", 600)


def traces_since(profile_dir: Path, since: float) -> list[Path]:
    """Chrome-trace files under ``profile_dir`` written at or after ``since`` (Unix seconds), sorted."""
    if not profile_dir.is_dir():
        return []
    return sorted(p for p in profile_dir.rglob("*")
                  if p.is_file() and p.name.endswith(TRACE_SUFFIXES) and p.stat().st_mtime >= since)
