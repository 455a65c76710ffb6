"""One streaming pass over vLLM's log (and its rotated files) at the byte level.

Only the lines that matter are decoded: each block is searched with ``bytes.find`` for the level words and
``Traceback``, and for the engine's periodic stats line; everything else is skipped at memchr speed. A log record
with its traceback (vLLM repeats the header on every line; uvicorn and crashing processes print bare tracebacks,
possibly behind a ``(Proc pid=N)`` prefix) becomes one :class:`ErrorEvent`, also across block boundaries.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from services.logtools.patterns import (
    METRICS_RE,
    PROBLEM_LEVELS,
    STAMP_RE,
    Line,
    continues_traceback,
    parse_line,
    starts_traceback,
    text,
)
from services.logtools.reader import BLOCK_BYTES, ReadStats, iter_blocks, mtime_s
from services.logtools.timeparse import StampClock

TRACEBACK_NEEDLE = b"Traceback (most recent"
LEVEL_RE = re.compile(rb"R(?:ROR|NING|ITICAL)")
"""ERROR, WARNING and CRITICAL from their first ``R`` (a literal first character lets ``re`` scan in C)."""
MAX_EVENT_BYTES = 1 << 20
"""A record with its traceback is cut after this many bytes (so that carrying it to the next block stays cheap)."""
MAX_TRACEBACK_LINES = 60
"""Traceback lines kept per event: the first and last halves when longer."""
_STAMP_LOOKBACK = (1024, 8192, 65536)


@dataclass(slots=True)
class ErrorEvent:
    """A WARNING/ERROR/CRITICAL record or a bare traceback; times in epoch seconds."""

    level: str
    stamp_s: float | None
    process: str | None
    source: str | None
    message: str
    exception: str | None = None
    traceback_raw: list[bytes] = field(default_factory=list)
    """Traceback lines as read (decoded only when shown: most events are counted, few are printed)."""

    def traceback_text(self) -> list[str]:
        """The traceback lines as printable text."""
        return [text(line) for line in self.traceback_raw]


@dataclass
class HttpCounts:
    """uvicorn access lines: inference requests (``POST /v1/...``) and error responses by status class."""

    inference_requests: int = 0
    status_4xx: int = 0
    status_5xx: int = 0


@dataclass
class ScanResult:
    """What one pass found; ``lines`` (inside the window) and ``http`` are counted only with ``on_metrics``."""

    read: ReadStats = field(default_factory=ReadStats)
    lines: int = 0
    http: HttpCounts = field(default_factory=HttpCounts)
    skipped_files: list[str] = field(default_factory=list)


class LogScanner:
    """Feeds events and periodic stats of log files to callbacks, oldest file first.

    Args:
        on_event: called with each :class:`ErrorEvent` inside the window (None: errors are not looked for).
        on_metrics: called per block with the periodic stats lines in the window (rows of :data:`METRICS_RE` groups)
            and the times of the first and last of them (epoch seconds or None).
        since_s: window start, epoch seconds (None: everything). The log is taken to be in time order: blocks
            ending before the window are skipped; files last written before it are not opened.
        block_bytes: read size, see :func:`services.logtools.reader.iter_blocks`.
    """

    def __init__(
        self,
        on_event: Callable[[ErrorEvent], None] | None = None,
        on_metrics: Callable[[list[tuple[bytes, ...]], float | None, float | None], None] | None = None,
        since_s: float | None = None,
        block_bytes: int = BLOCK_BYTES,
    ) -> None:
        self.on_event = on_event
        self.on_metrics = on_metrics
        self.since_s = since_s
        self.block_bytes = block_bytes
        self.result = ScanResult()
        self._in_window = since_s is None
        self._last_stamp_s: float | None = None
        self._clock = StampClock()

    def scan(self, files: Iterable[Path]) -> ScanResult:
        """Scan ``files`` in the given (chronological) order and return the counts."""
        for path in files:
            modified_s = mtime_s(path)
            if self.since_s is not None and modified_s is not None and modified_s < self.since_s:
                self.result.skipped_files.append(str(path))
                continue
            self._clock = StampClock(modified_s)
            self._scan_file(path, modified_s)
        return self.result

    def _scan_file(self, path: Path, modified_s: float | None) -> None:
        carry = b""
        blocks = iter_blocks(path, self.result.read, self.block_bytes)
        block = next(blocks, None)
        while block is not None:
            following = next(blocks, None)
            buf = carry + block if carry else block
            carry = self._scan_block(buf, final=following is None)
            block = following
        if carry:  # only when the last block ended inside an unfinished record
            self._scan_block(carry, final=True)
        if self._last_stamp_s is None:
            self._last_stamp_s = modified_s

    def _scan_block(self, buf: bytes, final: bool) -> bytes:
        """Scan one block of whole lines; returns the unfinished record at its end (to prepend to the next)."""
        start = 0
        if not self._in_window:
            start = self._window_start(buf)
            if start < 0:
                return b""
        carry_from = self._scan_errors(buf, start, final) if self.on_event is not None else len(buf)
        if self.on_metrics is not None:
            self.result.lines += buf.count(b"\n", start, carry_from)
            self._count_http(buf, start, carry_from)
            self._scan_metrics(buf, start, carry_from)
        self._last_stamp_s = self._stamp_before(buf, carry_from) or self._last_stamp_s
        return buf[carry_from:]

    # --- the --since window ---------------------------------------------------------------------------------------

    def _window_start(self, buf: bytes) -> int:
        """Offset of the first line stamped inside the window, or -1 when the whole block is before it."""
        since_s = self.since_s
        assert since_s is not None
        last_s = self._stamp_before(buf, len(buf))
        if last_s is None or last_s < since_s:
            if last_s is not None:
                self._last_stamp_s = last_s
            return -1
        for match in STAMP_RE.finditer(buf):
            stamp_s = self._clock.stamp_s(match[1])
            if stamp_s is not None and stamp_s >= since_s:
                self._in_window = True
                return buf.rfind(b"\n", 0, match.start()) + 1
        return -1

    def _stamp_before(self, buf: bytes, end: int) -> float | None:
        """Time of the last stamped line before offset ``end`` (looking back at most 64 KiB), epoch seconds."""
        for lookback in _STAMP_LOOKBACK:
            begin = max(0, end - lookback)
            last = None
            for last in STAMP_RE.finditer(buf, begin, end):  # noqa: B007 - keep the last match
                pass
            if last is not None:
                stamp_s = self._clock.stamp_s(last[1])
                if stamp_s is not None:
                    return stamp_s
            if begin == 0:
                break
        return None

    # --- uvicorn access lines and periodic stats ------------------------------------------------------------------

    def _count_http(self, buf: bytes, start: int, end: int) -> None:
        http = self.result.http
        http.inference_requests += buf.count(b'"POST /v1/', start, end)
        http.status_4xx += buf.count(b'HTTP/1.1" 4', start, end)
        http.status_5xx += buf.count(b'HTTP/1.1" 5', start, end)

    def _scan_metrics(self, buf: bytes, start: int, stop: int) -> None:
        """All periodic stats lines of ``buf[start:stop]`` in one ``findall``; only the first and last are dated."""
        assert self.on_metrics is not None
        rows = METRICS_RE.findall(buf, start, stop)
        if not rows:
            return
        first = METRICS_RE.search(buf, start, stop)
        last_at = buf.rfind(b"Avg prompt throughput: ", start, stop)
        assert first is not None
        self.on_metrics(rows, self._line_stamp(buf, first.start()), self._line_stamp(buf, last_at))

    def _line_stamp(self, buf: bytes, position: int) -> float | None:
        """Time stamp of the line holding ``position`` (epoch seconds; None when it has none)."""
        begin = buf.rfind(b"\n", 0, position) + 1
        return parse_line(buf[begin : buf.find(b"\n", position)], self._clock).stamp_s

    # --- warnings, errors, tracebacks -----------------------------------------------------------------------------

    def _scan_errors(self, buf: bytes, start: int, final: bool) -> int:
        """Report the events in ``buf[start:]``; returns where an unfinished record begins (``len(buf)``: none).

        Level words are found by :data:`LEVEL_RE`, which starts with a literal so ``re`` skips ahead in C;
        ``Traceback`` lines have a ``bytes.find`` of their own.
        """
        search = LEVEL_RE.search
        find = buf.find
        level = search(buf, start)
        traceback_at = find(TRACEBACK_NEEDLE, start)
        while level is not None or traceback_at >= 0:
            level_at = level.start() - (2 if level[0] == b"RNING" else 1) if level is not None else -1
            hit = traceback_at if level_at < 0 or 0 <= traceback_at < level_at else level_at
            begin = buf.rfind(b"\n", 0, hit) + 1
            end = self._record_at(buf, begin, final)
            if end < 0:
                return begin
            if level is not None and level_at < end:
                level = search(buf, end)
            if 0 <= traceback_at < end:
                traceback_at = find(TRACEBACK_NEEDLE, end)
        return len(buf)

    def _record_at(self, buf: bytes, begin: int, final: bool) -> int:
        """Emit the record starting at ``begin`` if it is a problem; returns the offset after it, -1: unfinished."""
        end = buf.find(b"\n", begin)
        head = parse_line(buf[begin:end], self._clock)
        is_traceback = starts_traceback(head.body)
        if head.level not in PROBLEM_LEVELS and not is_traceback:
            return end + 1
        tb_lines: list[bytes] = [head.body] if is_traceback else []
        exception: bytes | None = None
        state = "tb" if is_traceback else "head"
        position = end + 1
        size = len(buf)
        while True:
            if position >= size:
                if not final and position - begin < MAX_EVENT_BYTES:
                    return -1
                break
            line_end = buf.find(b"\n", position)
            if state == "head" and buf.find(b"Traceback", position, line_end) < 0:
                break  # a record without traceback: most warnings and errors end here, unparsed
            body = self._continuation(buf[position:line_end], head)
            if body is None:
                break
            if state == "tb" and not continues_traceback(body) and not starts_traceback(body):
                exception, state = body, "after"
            elif state == "after" and (continues_traceback(body) or starts_traceback(body)):
                state = "tb"
            elif state != "tb" and not starts_traceback(body):
                break
            else:
                state = "tb"
            tb_lines.append(body)
            position = line_end + 1
            if position - begin >= MAX_EVENT_BYTES:
                break
        self._emit(head, is_traceback, tb_lines, exception, buf, begin)
        return position

    def _continuation(self, raw: bytes, head: Line) -> bytes | None:
        """Body of ``raw`` if it can continue ``head``'s record (same header, or no header from the same process)."""
        if head.header and raw.startswith(head.header) and (head.level is not None):
            return raw[len(head.header) :]
        line = parse_line(raw, self._clock)
        if line.level is None and line.process == head.process:
            return line.body
        return None

    def _emit(
        self, head: Line, is_traceback: bool, tb_lines: list[bytes], exception: bytes | None, buf: bytes, begin: int
    ) -> None:
        assert self.on_event is not None
        stamp_s = head.stamp_s
        if stamp_s is None:
            stamp_s = self._stamp_before(buf, begin) or self._last_stamp_s or self._clock.reference_s
        if self.since_s is not None and stamp_s < self.since_s:
            return
        if len(tb_lines) > MAX_TRACEBACK_LINES:
            half = MAX_TRACEBACK_LINES // 2
            tb_lines = [*tb_lines[:half], b"    ...", *tb_lines[-half:]]
        exception_text = text(exception).strip() if exception is not None else None
        message = text(head.body).strip()
        if is_traceback:
            message = exception_text or message
        self.on_event(
            ErrorEvent(
                level=head.level if head.level is not None and head.level in PROBLEM_LEVELS else "ERROR",
                stamp_s=stamp_s,
                process=head.proc,
                source=head.src,
                message=message,
                exception=exception_text,
                traceback_raw=tb_lines,
            )
        )
