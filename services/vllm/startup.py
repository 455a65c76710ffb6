"""vLLM's start-up phase from its log: downloading, loading weights, compiling/warming up, ready, failed, stopped.

:func:`startup_phase` reads a log file (or lines) and returns the phase of the last start with its timings
(weights load, engine init, start to ready) and the error line when it failed, plus every start seen (so that the
first, cold start can be told from warm restarts). Pure apart from reading the file; never raises on bad content.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.logfiles import ReadStats, iter_blocks, mtime_s
from core.timeparse import StampClock, epoch_to_iso
from services.vllm.logformat import parse_line, text

PHASES = ("not_started", "starting", "downloading", "loading_weights", "compiling", "ready", "failed", "stopped")
"""Phase names in start-up order (``failed`` and ``stopped`` can follow any other)."""
MAX_ATTEMPTS = 50

_LAUNCH_RE = re.compile(r"^Starting vLLM: ")
"""This project's launcher: ``[INFO] Starting vLLM: <argv>`` (the ``[INFO]`` header is parsed off)."""
_SERVER_START_RE = re.compile(r"vLLM API server version|non-default args:")
_VERSION_RE = re.compile(r"(?:vLLM API server version|LLM engine \(v|version)\s*v?(\d+\.\d+\.\d+[\w.+\-]*)")
_DOWNLOAD_RE = re.compile(r"Downloading|Fetching \d+ files|\.(?:safetensors|bin|pt|gguf)\S*:\s+(\d+)%")
_PERCENT_RE = re.compile(r"(\d{1,3})%")
_LOADING_RE = re.compile(
    r"Starting to load model|Loading model weights|Loading safetensors checkpoint|Loading weights|Model loading took"
)
_LOAD_TIME_RE = re.compile(r"(?:Loading weights took|Model loading took [\d.]+ \w+ and)\s+([\d.]+)\s*s")
_COMPILE_RE = re.compile(
    r"Warming up|warmup|torch\.compile|Compiling|compiled function|Capturing|[Gg]raph capturing|profiling"
    r"|KV cache size|# GPU blocks|Maximum concurrency|init engine"
)
_INIT_TIME_RE = re.compile(r"init engine .*took ([\d.]+) s")
_READY_RE = re.compile(r"Starting vLLM server on|Uvicorn running on|Application startup complete|Available routes are")
_FATAL_RE = re.compile(
    r"EngineDeadError|Engine core initialization failed|EngineCore failed to start|died unexpectedly"
    r"|encountered a fatal error|Engine loop has died"
)
_STOP_RE = re.compile(r"Shutting down|Finished server process|shutdown triggered|KeyboardInterrupt")
_EXCEPTION_RE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")


@dataclass(frozen=True)
class StartupAttempt:
    """One start of vLLM found in the log; times are epoch seconds, durations seconds."""

    started_at_s: float | None
    ready_at_s: float | None
    outcome: str
    """``ready``, ``failed``, ``stopped`` (after being ready) or ``in_progress``."""
    load_s: float | None
    engine_init_s: float | None

    @property
    def startup_s(self) -> float | None:
        """Seconds from the first stamped line of the start to the server being ready (None if unknown)."""
        if self.started_at_s is None or self.ready_at_s is None:
            return None
        return round(max(0.0, self.ready_at_s - self.started_at_s), 3)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form; times as local ISO 8601."""
        return {
            "started_at": epoch_to_iso(self.started_at_s),
            "ready_at": epoch_to_iso(self.ready_at_s),
            "outcome": self.outcome,
            "startup_s": self.startup_s,
            "load_s": self.load_s,
            "engine_init_s": self.engine_init_s,
        }


@dataclass(frozen=True)
class StartupPhase:
    """Where vLLM's latest start stands, parsed from its log."""

    phase: str
    """One of :data:`PHASES`."""
    detail: str
    """One line for people, e.g. ``loading weights`` or ``ready after 51.0 s (weights 0.02 s, engine init 29.05 s)``."""
    load_s: float | None = None
    """Seconds vLLM reported for loading the weights."""
    engine_init_s: float | None = None
    """Seconds vLLM reported for engine init (profiling, KV cache, warm-up/compilation)."""
    startup_s: float | None = None
    """Seconds from the start's first stamped line to ready."""
    error_line: str | None = None
    """When failed: the first exception line (``ValueError: ...``), else the first ERROR line."""
    started_at_s: float | None = None
    phase_since_s: float | None = None
    ready_at_s: float | None = None
    vllm_version: str | None = None
    attempts: tuple[StartupAttempt, ...] = ()
    """Every start in the log, oldest first (the last :data:`MAX_ATTEMPTS`); the first is the cold start if the
    log has not been rotated since."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form; times as local ISO 8601."""
        return {
            "phase": self.phase,
            "detail": self.detail,
            "load_s": self.load_s,
            "engine_init_s": self.engine_init_s,
            "startup_s": self.startup_s,
            "error_line": self.error_line,
            "started_at": epoch_to_iso(self.started_at_s),
            "phase_since": epoch_to_iso(self.phase_since_s),
            "ready_at": epoch_to_iso(self.ready_at_s),
            "vllm_version": self.vllm_version,
            "attempts": [attempt.as_dict() for attempt in self.attempts],
        }


@dataclass
class _State:
    phase: str = "starting"
    server_started: bool = False
    started_at_s: float | None = None
    phase_since_s: float | None = None
    ready_at_s: float | None = None
    load_s: float | None = None
    engine_init_s: float | None = None
    download_pct: int | None = None
    error_line: str | None = None
    error_is_exception: bool = False


class StartupTracker:
    """Feeds log lines one at a time; :meth:`result` gives the :class:`StartupPhase` so far."""

    def __init__(self, clock: StampClock | None = None) -> None:
        self.clock = clock or StampClock()
        self.state: _State | None = None
        self.finished: list[StartupAttempt] = []
        self.last_stamp_s: float | None = None
        self.version: str | None = None
        self._record_header = b""
        self._record_exception: str | None = None
        """First exception line of the current multi-line record (lines sharing one header)."""

    def feed(self, raw: bytes) -> None:
        """One line (bytes, without newline)."""
        line = parse_line(raw, self.clock)
        if line.stamp_s is not None:
            self.last_stamp_s = line.stamp_s
        if line.header != self._record_header:
            self._record_header, self._record_exception = line.header, None
        indented = line.body[:1] in (b" ", b"\t")
        body = text(line.body, 500).strip()
        if not body:
            return
        state = self.state
        server_start = _SERVER_START_RE.search(body) is not None
        if _LAUNCH_RE.match(body) or (server_start and (state is None or state.server_started)):
            state = self._new_attempt()
        if server_start:
            if state is None:
                state = self._new_attempt()
            state.server_started = True
        if state is None:
            return
        if state.started_at_s is None and line.stamp_s is not None:
            state.started_at_s = line.stamp_s
        if ("version" in body or "(v" in body) and (version := _VERSION_RE.search(body)) is not None:
            self.version = version.group(1)
        is_exception = not indented and _EXCEPTION_RE.match(body) is not None
        if is_exception and self._record_exception is None:
            self._record_exception = body
        is_error = line.level in ("ERROR", "CRITICAL") and not indented
        self._advance(state, body, is_error and not body.startswith("Traceback"), is_exception)

    def _new_attempt(self) -> _State:
        if self.state is not None:
            self.finished.append(self._attempt(self.state))
            del self.finished[:-MAX_ATTEMPTS]
        self.state = _State()
        return self.state

    def _move(self, state: _State, phase: str) -> None:
        if state.phase != phase:
            state.phase = phase
            state.phase_since_s = self.last_stamp_s

    def _advance(self, state: _State, body: str, is_error: bool, is_exception: bool) -> None:
        if state.phase in ("ready", "stopped"):  # after ready only a dead engine or a stop changes the phase
            if (is_error or is_exception) and _FATAL_RE.search(body):
                cause = self._record_exception or body  # the root cause when the record showed it first
                state.error_line, state.error_is_exception = cause, _EXCEPTION_RE.match(cause) is not None
                self._move(state, "failed")
            elif state.phase == "ready" and _STOP_RE.search(body):
                self._move(state, "stopped")
            return
        if (load := _LOAD_TIME_RE.search(body)) is not None:
            state.load_s = float(load.group(1))
        if (init := _INIT_TIME_RE.search(body)) is not None:
            state.engine_init_s = float(init.group(1))
        if is_error or is_exception:  # before ready (or after failing): keep the first exception, else first error
            if state.error_line is None or (is_exception and not state.error_is_exception):
                state.error_line, state.error_is_exception = body, is_exception
            self._move(state, "failed")
            return
        order = PHASES.index(state.phase)
        if _READY_RE.search(body):
            state.ready_at_s = self.last_stamp_s
            state.error_line, state.error_is_exception = None, False
            self._move(state, "ready")
        elif state.phase == "failed":
            return
        elif _COMPILE_RE.search(body) and order <= PHASES.index("compiling"):
            self._move(state, "compiling")
        elif _LOADING_RE.search(body) and order <= PHASES.index("loading_weights"):
            self._move(state, "loading_weights")
        elif (download := _DOWNLOAD_RE.search(body)) is not None and order <= PHASES.index("downloading"):
            percent = download.group(1) or (m.group(1) if (m := _PERCENT_RE.search(body)) else None)
            state.download_pct = int(percent) if percent is not None else state.download_pct
            self._move(state, "downloading")

    def _attempt(self, state: _State) -> StartupAttempt:
        outcome = {"ready": "ready", "failed": "failed", "stopped": "stopped"}.get(state.phase, "in_progress")
        return StartupAttempt(state.started_at_s, state.ready_at_s, outcome, state.load_s, state.engine_init_s)

    def result(self) -> StartupPhase:
        """The phase of the latest start (``not_started`` when the log shows none)."""
        state = self.state
        if state is None:
            return StartupPhase("not_started", "no vLLM start-up in the log yet", vllm_version=self.version)
        attempts = (*self.finished, self._attempt(state))[-MAX_ATTEMPTS:]
        phase = StartupPhase(
            phase=state.phase,
            detail="",
            load_s=state.load_s,
            engine_init_s=state.engine_init_s,
            startup_s=attempts[-1].startup_s,
            error_line=state.error_line if state.phase == "failed" else None,
            started_at_s=state.started_at_s,
            phase_since_s=state.phase_since_s or state.started_at_s,
            ready_at_s=state.ready_at_s,
            vllm_version=self.version,
            attempts=attempts,
        )
        return replace(phase, detail=_detail(phase, state.download_pct))


def _detail(phase: StartupPhase, download_pct: int | None) -> str:
    timings = []
    if phase.load_s is not None:
        timings.append(f"weights {phase.load_s:g} s")
    if phase.engine_init_s is not None:
        timings.append(f"engine init {phase.engine_init_s:g} s")
    took = f" ({', '.join(timings)})" if timings else ""
    if phase.phase == "downloading":
        return "downloading weights" + (f" ({download_pct}%)" if download_pct is not None else "")
    if phase.phase == "loading_weights":
        return f"loading weights (took {phase.load_s:g} s)" if phase.load_s is not None else "loading weights"
    if phase.phase == "compiling":
        return "compiling / warming up" + took
    if phase.phase == "ready":
        after = f" after {phase.startup_s:g} s" if phase.startup_s is not None else ""
        return f"ready{after}{took}"
    if phase.phase == "failed":
        return f"failed: {phase.error_line}"
    if phase.phase == "stopped":
        return "stopped after being ready"
    return "process started"


def startup_phase(lines_or_path: Path | str | Iterable[str] | Iterable[bytes]) -> StartupPhase:
    """Start-up phase of vLLM from its log.

    Args:
        lines_or_path: the log file (a ``Path`` or a ``str`` path; a missing file gives ``not_started``, a gzip file
            is read too) or its lines (``str`` or ``bytes``, with or without newlines). Year-less stamps are dated
            against the file's modification time, or now for lines.

    Returns:
        The phase of the latest start with ``load_s``, ``engine_init_s``, ``startup_s`` (seconds), ``error_line``
        when failed, ``started_at_s``/``phase_since_s``/``ready_at_s`` (epoch seconds) and all starts seen.
    """
    if isinstance(lines_or_path, str | Path):
        path = Path(lines_or_path)
        tracker = StartupTracker(StampClock(mtime_s(path)))
        for block in iter_blocks(path, ReadStats()):
            lines = block.split(b"\n")
            lines.pop()
            for raw in lines:
                if raw.startswith(b"INFO:     ") and raw[10:11].isdigit():
                    continue  # uvicorn access line
                if b"throughput:" in raw:
                    continue  # periodic stats line
                tracker.feed(raw)
        return tracker.result()
    tracker = StartupTracker()
    for item in lines_or_path:
        raw = item.encode("utf-8", "surrogateescape") if isinstance(item, str) else item
        tracker.feed(raw.rstrip(b"\r\n"))
    return tracker.result()
