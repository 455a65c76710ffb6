"""The start-up phase judgement: vLLM's log lines, fed one at a time, to the phase of its latest start.

:class:`StartupTracker` turns lines into a :class:`StartupPhase` (downloading, loading weights, compiling, ready,
failed, stopped) with vLLM's reported timings, the root-cause error line and every start seen. Pure; never raises on
bad content. Which messages carry which facts is written down here, in vLLM's own old and new wordings
(``v1/worker/gpu_model_runner.py``, ``model_executor/model_loader``, ``v1/engine/core.py``,
``v1/core/kv_cache_utils.py``, ``entrypoints/openai/api_server.py``, uvicorn).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from typing import Any

from core.parsing import StampClock, epoch_to_iso
from engine.vllmlog import grammar as fmt

LAUNCH_RE = re.compile(r"^Starting vLLM: ")
"""This project's launcher: ``[INFO] Starting vLLM: <argv>`` (the ``[INFO]`` header is parsed off)."""
SERVER_START_RE = re.compile(r"vLLM API server version|non-default args:")
"""The API server's first lines: a new start of vLLM."""
VERSION_RE = re.compile(r"(?:vLLM API server version|LLM engine \(v|\bversion)\s*v?(\d+\.\d+\.\d+[\w.+\-]*)")
"""``vLLM API server version 0.32.0``, ``version 0.32.0``, ``Initializing a V1 LLM engine (v0.32.0)``."""
DOWNLOAD_RE = re.compile(r"Downloading|Fetching \d+ files|\.(?:safetensors|bin|pt|gguf)\S*:\s+(\d+)%")
PERCENT_RE = re.compile(r"(\d{1,3})%")
LOADING_RE = re.compile(
    r"Starting to load model|Loading model weights|Loading safetensors checkpoint|Loading weights|Model loading took"
)
WEIGHTS_TIME_RE = re.compile(r"Loading weights took\s+([\d.]+)\s*s")
"""``Loading weights took 0.92 seconds`` (the loader, per worker)."""
MODEL_LOAD_TIME_RE = re.compile(r"Model loading took (?:[\d.]+ \w+(?: memory)? and )?([\d.]+)\s*s")
"""``Model loading took 15.25 GiB and 6.123 seconds`` (per worker: weights and model set-up)."""
COMPILE_RE = re.compile(
    r"Warming up|warmup|torch\.compile|Compiling|compiled function|Capturing|[Gg]raph capturing|profiling"
    r"|KV cache size|# GPU blocks|Maximum concurrency|init engine"
)
INIT_TIME_RE = re.compile(r"init engine .*took ([\d.]+) s")
"""``init engine (profile, create kv cache, warmup model) took 39.09 s[econds]`` (per engine core)."""
KV_CACHE_RE = re.compile(r"KV cache size:|# (?:GPU|CPU|gpu|cpu) blocks:|num_gpu_blocks is:")
"""``GPU KV cache size: 1,234 tokens``, old ``# GPU blocks: 2345, # CPU blocks: 512``."""
CONCURRENCY_RE = re.compile(r"Maximum concurrency for")
"""``Maximum concurrency for 4,096 tokens per request: 5.2x`` (its own line in some versions)."""
READY_RE = re.compile(
    r"Starting vLLM (?:API )?server (?:\d+ )?on|Uvicorn running on|Application startup complete|Available routes are"
)
"""The API server answers requests (only its own lines count: :func:`is_api_server`)."""
FATAL_RE = re.compile(
    r"EngineDeadError|Engine core initialization failed|EngineCore failed to start|died unexpectedly"
    r"|encountered a fatal error|Engine loop has died|WorkerProc failed|Got fatal signal"
)
"""Errors that end a running server (after ready, other errors are about one request)."""
FOLLOW_UP_RE = re.compile(
    r"WorkerProc initialization failed|WorkerProc failed to start|Engine core initialization failed"
    r"|EngineCore failed to start|See root cause above|See stack trace (?:above )?for root cause|Got fatal signal"
    r"|EngineDeadError|Engine loop has died|died unexpectedly"
)
"""Errors that report another process's failure: never the root cause while a worker's own is known."""
STOP_RE = re.compile(r"Shutting down|Finished server process|shutdown triggered|KeyboardInterrupt")
EXCEPTION_RE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")
"""An exception line: ``ValueError: …``, ``torch.OutOfMemoryError: CUDA out of memory …``."""


def seconds(pattern: re.Pattern[str], message: str) -> float | None:
    """The seconds that ``pattern`` (one group) finds in ``message``, None without a match."""
    match = pattern.search(message)
    return float(match.group(1)) if match is not None else None


def is_api_server(proc: str | None) -> bool:
    """True for the API server's lines (``APIServer``, ``ApiServer_0``) and unprefixed ones."""
    return proc is None or proc[:9].lower() == "apiserver"


PHASES = ("not_started", "starting", "downloading", "loading_weights", "compiling", "ready", "failed", "stopped")
"""Phase names in start-up order (``failed`` and ``stopped`` can follow any other)."""
MAX_ATTEMPTS = 50
EPOCH_FIELDS = ("started_at_s", "ready_at_s", "phase_since_s")


def json_ready(pairs: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """``(name, value)`` pairs as a dict, the :data:`EPOCH_FIELDS` (epoch seconds) as local ISO 8601 named without
    ``_s``."""
    return {k[:-2] if k in EPOCH_FIELDS else k: epoch_to_iso(v) if k in EPOCH_FIELDS else v for k, v in pairs}


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
        """Seconds from the launch (or the first stamped line) to ready; None if unknown."""
        if self.started_at_s is None or self.ready_at_s is None:
            return None
        return round(max(0.0, self.ready_at_s - self.started_at_s), 3)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (:func:`json_ready`)."""
        names = ("started_at_s", "ready_at_s", "outcome", "startup_s", "load_s", "engine_init_s")
        return json_ready((name, getattr(self, name)) for name in names)


@dataclass(frozen=True)
class StartupPhase:
    """Where vLLM's latest start stands, parsed from its log."""

    phase: str
    """One of :data:`PHASES`."""
    detail: str
    """One line for people, e.g. ``loading weights`` or ``ready after 51 s (model load 0.02 s, engine init 29 s)``."""
    load_s: float | None = None
    """vLLM's model load seconds (``Model loading took``, else ``Loading weights took``), slowest worker's."""
    engine_init_s: float | None = None
    """vLLM's engine init seconds (profiling, KV cache, warm-up); the slowest core's."""
    kv_cache_line: str | None = None
    """The line giving the KV cache's size."""
    startup_s: float | None = None
    """Seconds from the start's first stamped line to ready."""
    error_line: str | None = None
    """When failed: the root cause, the first exception line of any process, else its first
    ERROR line; reports of another process's failure come last."""
    error_process: str | None = None
    """The process that logged :attr:`error_line` (``Worker_TP1``); None without prefix."""
    started_at_s: float | None = None
    phase_since_s: float | None = None
    ready_at_s: float | None = None
    vllm_version: str | None = None
    attempts: tuple[StartupAttempt, ...] = ()
    """Every start in the log, oldest first (the last :data:`MAX_ATTEMPTS`)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (:func:`json_ready`)."""
        pairs = [(f.name, getattr(self, f.name)) for f in fields(self) if f.name != "attempts"]
        return {**json_ready(pairs), "attempts": [attempt.as_dict() for attempt in self.attempts]}


@dataclass
class _State:
    phase: str = "starting"
    server_started: bool = False
    started_at_s: float | None = None
    phase_since_s: float | None = None
    ready_at_s: float | None = None
    weights_s: float | None = None
    model_load_s: float | None = None
    engine_init_s: float | None = None
    kv_cache_line: str | None = None
    download_pct: int | None = None
    error_line: str | None = None
    error_process: str | None = None
    error_rank: tuple[bool, bool] = (False, False)
    """(not a follow-up of another failure, an exception line): a higher rank replaces the error."""

    @property
    def load_s(self) -> float | None:
        return self.model_load_s if self.model_load_s is not None else self.weights_s


def _max(current: float | None, value: float | None) -> float | None:
    return value if current is None else current if value is None else max(current, value)


class StartupTracker:
    """Feeds log lines one at a time; :meth:`result` gives the :class:`StartupPhase` so far."""

    def __init__(self, clock: StampClock | None = None) -> None:
        self.clock = clock or StampClock()
        self.state: _State | None = None
        self.finished: list[StartupAttempt] = []
        self.last_stamp_s: float | None = None
        self.version: str | None = None
        self._record_header = b""
        self._record_exception: str | None = None  # first exception line of the record (lines sharing a header)

    def feed(self, raw: bytes) -> None:
        """One line (bytes, without newline; container stamps and colour codes are removed)."""
        line = fmt.parse_line(raw, self.clock)
        if line.stamp_s is not None:
            self.last_stamp_s = line.stamp_s
        if line.header != self._record_header:
            self._record_header, self._record_exception = line.header, None
        indented = line.body[:1] in (b" ", b"\t")
        body = fmt.text(line.body, 500).strip()
        if not body:
            return
        state = self.state
        server_start = SERVER_START_RE.search(body) is not None
        if LAUNCH_RE.match(body) or (server_start and (state is None or state.server_started)):
            state = self._new_attempt()
        if server_start:
            if state is None:
                state = self._new_attempt()
            state.server_started = True
        if state is None:
            return
        if state.started_at_s is None and line.stamp_s is not None:
            state.started_at_s = line.stamp_s
        if ("version" in body or "(v" in body) and (version := VERSION_RE.search(body)) is not None:
            self.version = version.group(1)
        is_exception = not indented and EXCEPTION_RE.match(body) is not None
        if is_exception and self._record_exception is None:
            self._record_exception = body
        is_error = line.level in ("ERROR", "CRITICAL") and not indented and not body.startswith("Traceback")
        self._advance(state, body, line.proc, is_error, is_exception)

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

    def _facts(self, state: _State, body: str) -> None:
        """Timings and the KV cache line of this start (every process's: workers load, engine cores init)."""
        if "took" in body:
            state.weights_s = _max(state.weights_s, seconds(WEIGHTS_TIME_RE, body))
            state.model_load_s = _max(state.model_load_s, seconds(MODEL_LOAD_TIME_RE, body))
            state.engine_init_s = _max(state.engine_init_s, seconds(INIT_TIME_RE, body))
        if KV_CACHE_RE.search(body) or (state.kv_cache_line is None and CONCURRENCY_RE.search(body)):
            state.kv_cache_line = body

    def _error(self, state: _State, body: str, proc: str | None, is_exception: bool) -> None:
        """Keep the root cause: an exception before a plain error, a process's own failure before a report of it."""
        rank = (FOLLOW_UP_RE.search(body) is None, is_exception)
        if state.error_line is None or rank > state.error_rank:
            state.error_line, state.error_process, state.error_rank = body, proc, rank

    def _advance(self, state: _State, body: str, proc: str | None, is_error: bool, is_exception: bool) -> None:
        if state.phase in ("ready", "stopped"):  # after ready only a dead engine or a stop changes the phase
            # once stopping, vLLM's own teardown may log EngineDeadError (its output handler racing the engine's
            # exit, vLLM 0.32): part of the stop, not a failure of the start
            if state.phase == "ready" and (is_error or is_exception) and FATAL_RE.search(body):
                cause = self._record_exception or body  # the root cause when the record showed it first
                state.error_line, state.error_rank = None, (False, False)
                self._error(state, cause, proc, EXCEPTION_RE.match(cause) is not None)
                self._move(state, "failed")
            elif state.phase == "ready" and STOP_RE.search(body):
                self._move(state, "stopped")
            return
        self._facts(state, body)
        if is_error or is_exception:  # before ready (or after failing): any process's error fails the start
            self._error(state, body, proc, is_exception)
            self._move(state, "failed")
            return
        order = PHASES.index(state.phase)
        if READY_RE.search(body) and is_api_server(proc):  # a TP run is ready when its API server is
            state.ready_at_s = self.last_stamp_s
            state.error_line, state.error_process, state.error_rank = None, None, (False, False)
            self._move(state, "ready")
        elif state.phase == "failed":
            return
        elif COMPILE_RE.search(body) and order <= PHASES.index("compiling"):
            self._move(state, "compiling")
        elif LOADING_RE.search(body) and order <= PHASES.index("loading_weights"):
            self._move(state, "loading_weights")
        elif (download := DOWNLOAD_RE.search(body)) is not None and order <= PHASES.index("downloading"):
            percent = download.group(1) or (m.group(1) if (m := PERCENT_RE.search(body)) else None)
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
        failed = state.phase == "failed"
        phase = StartupPhase(
            phase=state.phase,
            detail="",
            load_s=state.load_s,
            engine_init_s=state.engine_init_s,
            kv_cache_line=state.kv_cache_line,
            startup_s=attempts[-1].startup_s,
            error_line=state.error_line if failed else None,
            error_process=state.error_process if failed else None,
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
        timings.append(f"model load {round(phase.load_s, 2):g} s")
    if phase.engine_init_s is not None:
        timings.append(f"engine init {round(phase.engine_init_s, 2):g} s")
    took = f" ({', '.join(timings)})" if timings else ""
    if phase.phase == "downloading":
        return "downloading weights" + (f" ({download_pct}%)" if download_pct is not None else "")
    if phase.phase == "loading_weights":
        return f"loading weights (took {round(phase.load_s, 2):g} s)" if phase.load_s is not None else "loading weights"
    if phase.phase == "compiling":
        return "compiling / warming up" + took
    if phase.phase == "ready":
        after = f" after {phase.startup_s:g} s" if phase.startup_s is not None else ""
        return f"ready{after}{took}"
    if phase.phase == "failed":
        return f"failed: {phase.error_line}" + (f" (in {phase.error_process})" if phase.error_process else "")
    if phase.phase == "stopped":
        return "stopped after being ready"
    return "process started"
