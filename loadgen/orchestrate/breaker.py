"""The server-down breaker: a run whose requests keep failing at the connection level is ended early.

When vLLM dies mid-run, every request fails at once (refused, reset, DNS) and a closed loop would retry it as fast as
the machine allows, flooding the rows. The benchmark reads the rows as they come (:class:`RowWatch`) and the breaker
(:class:`ServerDownBreaker`, pure) trips once connection-level failures have gone on for SERVER_DOWN_S with no
answer in between. An HTTP error answer (4xx/5xx), a cut or invalid stream all prove the server is up — except the
router's own answers that no engine behind it can be reached (:data:`NO_ENGINE_ANSWERS`: the stack's router stays up
when its engine dies) and vLLM's that the run's model is not served (:data:`MODEL_GONE_ANSWERS`: ``./start_vllm.sh``
switched the stack to another model mid-run; the run measures one model, so it ends); timeouts prove nothing either
way.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from core.records import ENGINE_GONE_ANSWERS, MODEL_GONE_ANSWERS, MODEL_GONE_LINE, NO_ENGINE_ANSWERS

MODEL_GONE = "the stack was switched to another model"
"""The cause of a run ended by :data:`core.records.MODEL_GONE_ANSWERS`."""
ANSWERED_ERRORS = frozenset({"http_status", "no_done", "empty_output", "invalid_stream"})


def connection_cause(message: str) -> str:
    """A connection-level failure in a few words: ``connection refused``, ``connection reset``, ``DNS lookup
    failed`` or ``connection failed`` (the message of a ``connection`` row)."""
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
    """Trips when connection-level failures span ``limit_s`` seconds (their end times) with no answer in between;
    the verdict names the first failure's time and the latest failure's cause.

    Args:
        limit_s: SERVER_DOWN_S, seconds (> 0).
    """

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
    """Reads the new complete lines of a growing rows file (from where the last read stopped): counts the measured
    rows (``count``; ``ok`` of them successes) and feeds the breaker, so polling a long run costs only its new rows."""

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
