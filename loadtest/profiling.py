"""``make benchmark PROFILE=1``: run the measured window under vLLM's torch profiler (Chrome traces).

vLLM exposes ``/start_profile`` and ``/stop_profile`` only when started with a profiler configuration, so in local
mode the benchmark swaps the supervised vLLM for its ``--profile`` twin for the run and swaps back afterwards;
elsewhere (compose, a remote engine) vLLM must already run with ``--profiler-config``. Traces land in
``logs/profile/``; the sidecar copies them into ``reports/profile/<run id>/`` and links them from the report.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from core.settings import Settings

TRACE_SUFFIXES = (".json", ".json.gz")


class ProfilingError(RuntimeError):
    """The profiler cannot be used; the message says why and what to do."""


def engine_has_profiler(settings: Settings) -> bool:
    """True when the launcher started vLLM with ``--profiler-config`` (from ``logs/engine_state.json``)."""
    from services.sidecar.envinfo import engine_state

    return "--profiler-config" in engine_state(settings.engine_state_file).get("argv", [])


def enable(settings: Settings) -> bool:
    """Make sure vLLM runs with its profiler; returns True when vLLM was swapped (swap back with :func:`disable`).

    Raises:
        ProfilingError: not local mode and vLLM has no profiler, or the swap failed.
    """
    if engine_has_profiler(settings):
        return False
    from services.stackctl import process_states, switch_vllm

    if process_states(settings) is None:
        raise ProfilingError(
            "PROFILE=1 needs vLLM started with --profiler-config: in local mode `make up` first; with compose set "
            'VLLM_EXTRA_ARGS=\'--profiler-config {"profiler":"torch","torch_profiler_dir":"/app/logs/profile"}\''
        )
    print("[INFO] Restarting vLLM with its torch profiler for this run (switching back afterwards)...", flush=True)
    try:
        switch_vllm(settings, profile=True)
    except RuntimeError as exc:
        raise ProfilingError(f"vLLM with profiler did not start: {exc}") from None
    return True


def disable(settings: Settings) -> None:
    """Swap the profiling vLLM back for the normal one (profiler endpoints off again) when the local stack runs
    it — also after an interrupted run that swapped it in; a no-op elsewhere."""
    from services.stackctl import process_states, switch_vllm

    states = process_states(settings) or {}
    if states.get("vllm-profile", {}).get("statename") not in ("RUNNING", "STARTING"):
        return
    print("[INFO] Restarting vLLM without the profiler...", flush=True)
    switch_vllm(settings, profile=False)


def _post(settings: Settings, path: str, timeout_s: float) -> None:
    try:
        response = httpx.post(f"{settings.vllm_url}{path}", timeout=timeout_s)
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
    found = [
        p
        for p in profile_dir.rglob("*")
        if p.is_file() and p.name.endswith(TRACE_SUFFIXES) and p.stat().st_mtime >= since
    ]
    return sorted(found)
