"""Where a vLLM start spends its time: the seconds between the log lines that bound its phases.

vLLM 0.32's CPU build starts three Python processes in turn (API server → engine core → worker), each importing
torch and vLLM, then loads the weights, lays out the KV cache, warms the model up (compiling it unless ``-O0``) and
opens the API. :func:`start_breakdown` reads those phases from the stamps of the lines that mark them (1 s
resolution), from the launch (the launcher's ``started_at`` in the engine's state file); :func:`latest_start`
reads the latest launch of the serving engine (its lines from ``log_start`` on, bounded) for ``make status``, the
sidecar's ``/startup`` and ``./start_vllm.sh``; ``make bench-engine`` reads each of its starts with the same
function. Pure apart from reading the log.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from core.enginestate import EngineState
from core.timeparse import StampClock
from engine.logformat import parse_line

START_MARKS = (
    ("api_server", b"(APIServer pid="),
    ("engine_core", b"Initializing a V1 LLM engine"),
    ("worker", b"Starting to load model"),
    ("weights", b"Loading weights took"),
    ("warmup_start", b"Warming up model"),
    ("warmup_end", b"Warming up done"),
    ("engine_ready", b"init engine (profile, create kv cache, warmup model) took"),
    ("api_ready", b"Starting vLLM server on"),
)
"""Lines that bound the phases of one vLLM start (their stamps, read with the project's log grammar)."""
PHASES = (
    ("imports_api_server", None, "api_server"),
    ("spawn_engine_core", "api_server", "engine_core"),
    ("spawn_worker", "engine_core", "worker"),
    ("load_weights", "worker", "weights"),
    ("to_warmup", "weights", "warmup_start"),
    ("warmup_compile", "warmup_start", "warmup_end"),
    ("kv_cache_and_rest", "warmup_end", "engine_ready"),
    ("api_ready", "engine_ready", "api_ready"),
)
"""(phase, from mark, to mark): ``None`` is the launch; a start without warm-up (eager) has no warm-up phase."""
LABELS = {
    "imports_api_server": "API server start + imports",
    "spawn_engine_core": "engine-core process + imports",
    "spawn_worker": "worker process + imports",
    "load_weights": "weights",
    "to_warmup": "model set-up",
    "warmup_compile": "compile + warm-up",
    "kv_cache_and_rest": "KV cache + rest",
    "api_ready": "API up",
}
"""How people read each phase (``make status``)."""
MAX_START_BYTES = 2 << 20
"""Most bytes read from a launch's first line: a start's lines until ready are tens of KiB."""


def start_breakdown(lines: Sequence[bytes], launched_s: float) -> dict[str, float]:
    """Seconds per phase of the last start in ``lines`` (vLLM's log), launch at ``launched_s`` (epoch). vLLM stamps
    have 1 s resolution, so each phase is ± 1 s (pure apart from the clock)."""
    clock = StampClock(launched_s + 3600)
    marks: dict[str, float] = {}
    for raw in lines:
        for name, needle in START_MARKS:
            if needle in raw and name not in marks:
                stamp = parse_line(raw, clock).stamp_s
                if stamp is not None and stamp >= launched_s - 1:
                    marks[name] = stamp
    if "warmup_start" not in marks and "weights" in marks:
        marks["warmup_start"] = marks["warmup_end"] = marks["weights"]
    marks["launch"] = launched_s
    out = {}
    for phase, begin, end in PHASES:
        a, b = marks.get(begin or "launch"), marks.get(end)
        if a is not None and b is not None:
            out[phase] = round(max(0.0, b - a), 1)
    return out


def latest_start(log: Path, state: EngineState | None) -> dict[str, float]:
    """:func:`start_breakdown` of the launch ``state`` describes (its ``started_at`` and where its lines begin in
    ``log``, ``log_start``: none when the log was new, then from its first line); empty when unknown (no state, the
    log rotated away since, or not started yet)."""
    if state is None or state.started_at is None:
        return {}
    try:
        with log.open("rb") as fh:
            st = os.fstat(fh.fileno())
            if state.log_start is None:  # the log did not exist before this launch: its first lines are the start's
                offset = 0
            elif (st.st_dev, st.st_ino) == (state.log_start.dev, state.log_start.ino):
                offset = state.log_start.offset
            else:
                return {}
            fh.seek(offset)
            lines = fh.read(MAX_START_BYTES).splitlines()
    except OSError:
        return {}
    return start_breakdown(lines, state.started_at)


def phases_line(phases: dict[str, float]) -> str | None:
    """``  last start 37 s: API server start + imports 10, engine-core process + imports 7, ... (s, ±1 each)``;
    None without phases (or with a start not yet ready: then the phase line says where it is)."""
    if "api_ready" not in phases:
        return None
    total = sum(phases.values())
    parts = ", ".join(f"{LABELS[name]} {phases[name]:g}" for name, _, _ in PHASES if name in phases)
    return f"  last start {total:.0f} s: {parts} (s, ±1 each)"
