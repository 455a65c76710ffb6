"""vLLM's start-up phase from its log (judged by :mod:`engine.vllmlog.tracker`), read fast at any log size.

:func:`read_startup` (``GET /startup``, ``make status``, ``make up``, the reports) reads a log family (``vllm.log``
and its rotated files) whole up to :data:`FULL_READ_BYTES`; a bigger one only in three regions: the head of its oldest
file (the cold start), the latest launch from ``engine_state.json``'s ``log_start``, and the tail of ``vllm.log``
(a fatal error, a stop, an unrecorded start). Starts between those are not listed.

:func:`start_breakdown` says where a start spent its time, between the lines that bound its phases (API server →
engine core → worker processes, weights, KV cache, warm-up/compile, API up; stamps have 1 s resolution);
:func:`latest_start` reads it for the serving engine's latest launch.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from core.enginestate import EngineState
from core.logfiles import ReadStats, iter_spans, mtime_s, rotated_family
from core.parsing import StampClock
from engine.vllmlog import grammar as fmt
from engine.vllmlog.tracker import StartupPhase, StartupTracker

FULL_READ_BYTES = 8 << 20
"""A log family up to this size (bytes) is read whole; a bigger one in bounded regions (:func:`read_startup`)."""
REGION_BYTES = 1 << 20
"""Most bytes read from the oldest file's head and from the latest launch (a start is tens of KiB)."""
REGION_BLOCK_BYTES = 64 << 10
TAIL_BYTES = 256 << 10
"""Bytes read from the end of ``vllm.log``."""


_ACCESS = b"INFO:     "


def _skipped(raw: bytes) -> bool:
    """Lines that never move a phase and are most of a serving log: uvicorn access lines and periodic stats."""
    at = raw.find(_ACCESS, 0, 120)
    return (at >= 0 and raw[at + 10 : at + 11].isdigit()) or fmt.METRICS_NEEDLE in raw


def startup_phase(lines_or_path: Path | str | Iterable[str] | Iterable[bytes]) -> StartupPhase:
    """Start-up phase of vLLM from its log.

    Args:
        lines_or_path: the log file (``Path`` or ``str``; missing: ``not_started``; gzip read too) or its lines
            (``str`` or ``bytes``). Year-less stamps are dated against the file's mtime, or now for lines.

    Returns:
        The latest start's phase, timings (seconds), error line when failed, times (epoch seconds) and all starts.
    """
    if isinstance(lines_or_path, str | Path):
        path = Path(lines_or_path)
        tracker = StartupTracker(StampClock(mtime_s(path)))
        for span in iter_spans(path, ReadStats()):
            _feed_span(tracker, span)
        return tracker.result()
    tracker = StartupTracker()
    for item in lines_or_path:
        raw = item.encode("utf-8", "surrogateescape") if isinstance(item, str) else item
        tracker.feed(raw.rstrip(b"\r\n"))
    return tracker.result()


def _feed_span(tracker: StartupTracker, span: tuple[bytes, int, int]) -> None:
    """Every line of a read span that can move a phase."""
    buf, start, stop = fmt.clean_span(*span)
    lines = buf[start:stop].split(b"\n")
    lines.pop()
    for raw in lines:
        if not _skipped(raw):
            tracker.feed(raw)


def _identity(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size


def _regions(family: list[str], log_start: tuple[int, int, int] | None) -> Iterator[tuple[str, int, int | None, int]]:
    """``(file, from byte, at most bytes or None, settled after bytes)`` of a big log, in order, without
    overlaps: the oldest file's head, the latest launch, the current file's tail. A region ends once it has read its
    settle mark and its start is ready or failed (-1: never)."""
    ids = {path: _identity(path) for path in family}
    current = family[-1]
    launch_file = next(
        (p for p, i in ids.items() if log_start and i and (i[0], i[1]) == log_start[:2] and log_start[2] <= i[2]),
        None,
    )
    consumed: dict[str, int] = {}
    oldest = family[0]
    if launch_file == oldest and log_start and log_start[2] < REGION_BYTES:  # the launch is in the head: one region
        yield oldest, 0, log_start[2] + REGION_BYTES, log_start[2]
        consumed[oldest] = log_start[2] + REGION_BYTES
    else:
        yield oldest, 0, REGION_BYTES, 0
        consumed[oldest] = REGION_BYTES
        if launch_file and log_start:
            begin = max(log_start[2], consumed.get(launch_file, 0))
            yield launch_file, begin, REGION_BYTES, 0
            consumed[launch_file] = begin + REGION_BYTES
    size = (ids.get(current) or (0, 0, 0))[2]
    yield current, max(size - TAIL_BYTES, consumed.get(current, 0)), None, -1


def read_startup(path: Path, engine_state: EngineState | None = None, stats: ReadStats | None = None) -> StartupPhase:
    """:func:`startup_phase` of vLLM's log ``path`` and its rotated files, reading a bounded amount (module
    docstring); the launch is found by ``engine_state.log_start``'s device and inode, so rotation does not lose it.

    Args:
        stats: filled with the files and bytes read (tests check the bound with it).
    """
    stats = stats if stats is not None else ReadStats()
    family = rotated_family(path)
    tracker = StartupTracker(StampClock(mtime_s(path)))
    if not family:
        return tracker.result()
    total = sum((_identity(p) or (0, 0, 0))[2] for p in family)
    if total <= FULL_READ_BYTES:
        for member in family:
            for span in iter_spans(member, stats):
                _feed_span(tracker, span)
        return tracker.result()
    position = engine_state.log_start if engine_state else None
    log_start = (position.dev, position.ino, position.offset) if position else None
    for member, begin, most, settle_after in _regions(family, log_start):
        spans = iter_spans(member, stats, REGION_BLOCK_BYTES, start_at=begin or None)
        before, read = tracker.state, 0
        for span in spans:
            _feed_span(tracker, span)
            read += span[2] - span[1]
            if most is not None and read >= most:
                break
            state = tracker.state
            over = state is not None and state is not before and state.phase in ("ready", "failed", "stopped")
            if 0 <= settle_after <= read and over:  # the attempt read is over: the rest of the region is serving lines
                break
        spans.close()
    return tracker.result()


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
"""Lines that bound the phases of one vLLM start."""
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
"""(phase, from mark, to mark): ``None`` is the launch; an eager start has no warm-up phase."""
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
"""Most bytes read from a launch's first line."""


def start_breakdown(lines: Sequence[bytes], launched_s: float) -> dict[str, float]:
    """Seconds per phase of the last start in ``lines`` (vLLM's log) launched at ``launched_s`` (epoch), ± 1 s each."""
    clock = StampClock(launched_s + 3600)
    marks: dict[str, float] = {}
    for raw in lines:
        for name, needle in START_MARKS:
            if needle in raw and name not in marks:
                stamp = fmt.parse_line(raw, clock).stamp_s
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
    """:func:`start_breakdown` of the launch ``state`` records; empty when unknown or rotated away."""
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
    """``  last start 37 s: API server start + imports 10, ... (s, ±1 each)``; None until a start is ready."""
    if "api_ready" not in phases:
        return None
    total = sum(phases.values())
    parts = ", ".join(f"{LABELS[name]} {phases[name]:g}" for name, _, _ in PHASES if name in phases)
    return f"  last start {total:.0f} s: {parts} (s, ±1 each)"
