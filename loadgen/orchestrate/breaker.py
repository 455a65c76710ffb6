"""The server-down breaker: a run whose requests fail at the connection level for SERVER_DOWN_S with no answer in
between is ended early (a dead vLLM would be retried as fast as the machine allows). Any HTTP answer proves the server
up, except the router's "no engine" (:data:`NO_ENGINE_ANSWERS`) and vLLM's "model not served" (the stack was switched:
:data:`MODEL_GONE_ANSWERS`); timeouts prove nothing.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from core.records import ENGINE_GONE_ANSWERS, MODEL_GONE_ANSWERS, MODEL_GONE_LINE, NO_ENGINE_ANSWERS

MODEL_GONE = "the stack was switched to another model"  # the cause of a run ended by MODEL_GONE_ANSWERS
ANSWERED_ERRORS = frozenset({"http_status", "no_done", "empty_output", "invalid_stream"})


def connection_cause(message: str) -> str:
    """A ``connection`` row's error ``message`` in a few words (``connection refused``, ``DNS lookup failed``, …)."""
    text = message.lower()
    if any(answer.decode().lower() in text for answer in MODEL_GONE_ANSWERS):
        return MODEL_GONE
    if any(answer.decode().lower() in text for answer in NO_ENGINE_ANSWERS):
        return "no engine answers behind the router"
    if "refused" in text:
        return "connection refused"
    if "reset" in text or "broken pipe" in text:
        return "connection reset"
    if "gaierror" in text or "name or service" in text or "resolve" in text or "nodename" in text:
        return "DNS lookup failed"
    return "connection failed"


@dataclass(frozen=True)
class ServerDown:
    """The breaker tripped: the first failure's Unix time (s), its cause in words, and how long failures went on (s)."""

    since: float
    cause: str
    for_s: float

    def line(self) -> str:
        """``vLLM stopped answering at 01:02:03: connection refused for 5 s`` (local time)."""
        at = time.strftime("%H:%M:%S", time.localtime(self.since))
        if self.cause == MODEL_GONE:
            return f"{MODEL_GONE_LINE} at {at}: {MODEL_GONE}, HTTP 404 for {self.for_s:.0f} s"
        return f"vLLM stopped answering at {at}: {self.cause} for {self.for_s:.0f} s"


class ServerDownBreaker:
    """Trips when connection-level failures span ``limit_s`` (SERVER_DOWN_S, > 0) seconds with no answer between;
    the verdict names the first failure's time and the latest one's cause."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.first: float | None = None
        self.cause = ""

    def answered(self) -> None:
        """A request succeeded or the server answered with an error: it is up."""
        self.first = None

    def failed(self, ended_at: float, message: str) -> ServerDown | None:
        """A request failed at the connection level at Unix time ``ended_at`` (s); the verdict once tripped."""
        if self.first is None or ended_at < self.first:
            self.first = ended_at
        self.cause = connection_cause(message)  # the latest: a cut stream first, then what the dead server does
        span = ended_at - self.first
        return ServerDown(self.first, self.cause, span) if span >= self.limit_s else None


class RowWatch:
    """Reads a growing rows file's new complete lines: counts measured rows (``count``, ``ok`` of them successes)
    and feeds the breaker (``down`` once tripped)."""

    def __init__(self, path: Path, breaker: ServerDownBreaker | None = None) -> None:
        self.path = path
        self.breaker = breaker
        self.offset = 0
        self.count = 0
        self.ok = 0
        self.down: ServerDown | None = None

    def __call__(self) -> int:
        """Measured rows so far (a line still being written is read next time)."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return self.count
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].splitlines():
            if b'"phase":"measured"' not in line:
                continue
            self.count += 1
            self.ok += b'"ok":true' in line
            if self.breaker is not None and self.down is None:
                self._watch(line)
        return self.count

    def _watch(self, line: bytes) -> None:
        assert self.breaker is not None
        no_engine = b'"error_kind":"http_status"' in line and any(answer in line for answer in ENGINE_GONE_ANSWERS)
        if not no_engine and (
            b'"ok":true' in line or any(b'"error_kind":"%s"' % k.encode() in line for k in ANSWERED_ERRORS)
        ):
            self.breaker.answered()
        elif no_engine or b'"error_kind":"connection"' in line:
            try:
                row = json.loads(line)
                ended_at = float(row["started_at"]) + float(row.get("e2e_ms") or 0.0) / 1000.0
            except (ValueError, KeyError, TypeError):
                return
            self.down = self.breaker.failed(ended_at, str(row.get("error") or ""))
