"""One vLLM start read from its log: the seconds of each start-up phase and what the compile cache did.

Pure apart from the stamp clock; used by ``bench_engine_defaults.py`` (``make bench-engine``) for each run.
"""

from __future__ import annotations

from collections.abc import Sequence

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


def compile_cache(lines: Sequence[bytes]) -> str:
    """What vLLM's compile cache did in one start (pure): its AOT artifact loaded, failed to load (then it compiles
    again), was first written, or AOT was off (torch.compile's own caches, which log nothing) or nothing compiled."""
    text = b"\n".join(lines)
    if b"Directly load AOT compilation" in text:
        return "aot-hit"
    if b"due to a load failure" in text:
        return "aot-load-failed"
    if b"saved AOT compiled function" in text:
        return "aot-written"
    return "no-aot" if b"Warming up model" in text else "no-compile"
