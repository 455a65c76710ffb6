"""One streaming pass over vLLM's log (and its rotated files) at the byte level: only candidate lines are decoded,
found by literal searches at C speed (:class:`Needles`: the level words, ``memchr`` for their rare ``R``; `` error:``;
``Traceback (most recent``, ``memchr`` for its ``b``; where the letter is common in a file, a plain search instead,
probed again every :data:`REPROBE_SPANS` spans); a record with its traceback becomes one :class:`ErrorEvent`, also
across blocks; the stats lines come from one ``findall`` per block (cleaned first: uvicorn colours its access lines)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable

from core.logfiles import BLOCK_BYTES, StrPath, iter_spans, mtime_s
from core.parsing import StampClock
from engine.vllmlog.grammar import (
    METRICS_NEEDLE,
    METRICS_RE,
    PROBLEM_LEVELS,
    STAMP_RE,
    Line,
    clean_span,
    continues_traceback,
    cri_tagged,
    hold_partials,
    is_partial,
    join_partials,
    last_stamp,
    logical_line_begin,
    logical_line_end,
    parse_line,
    starts_traceback,
    text,
)
from logtools.groups import ErrorEvent, ScanResult

MAX_EVENT_BYTES = 1 << 20  # a record is cut after this many bytes (carrying it over stays cheap)
MAX_TRACEBACK_LINES = 60  # per event: the first and last halves when longer
_STAMP_LOOKBACK = (1024, 8192, 65536)
_MAX_TAILS = 16
"""Spans whose last stamp is looked for only when needed, at the latest after this many (newest first)."""
_RECORD_WINDOW_BYTES = 4096  # first window around a CRI candidate line in which partial lines are joined

MetricsCallback = Callable[[list[tuple[bytes, ...]], float | None, float | None], None]


def _line_begin(buf: bytes, low: int, position: int) -> int:
    """Offset where the line holding ``position`` begins, not before ``low``."""
    newline = buf.rfind(b"\n", low, position)
    return newline + 1 if newline >= 0 else low


TRACEBACK_NEEDLE = b"Traceback (most recent"
_TRACEBACK_B = TRACEBACK_NEEDLE.index(b"b")  # access and stats lines lack a ``b``
_AFTER_B = TRACEBACK_NEEDLE[_TRACEBACK_B + 1]
MAX_B_MISSES = 64
"""``b`` s that are not a traceback after which a span is searched for the whole needle instead."""
_WORD_AFTER_R = {ord("R"): (b"ERROR", 1), ord("N"): (b"WARNING", 2), ord("I"): (b"CRITICAL", 1)}
"""The level words a problem line has, by the byte after their ``R`` (at offset 1, 2, 1), which is rare in access,
stats and INFO lines."""
LEVEL_RE = re.compile(rb"R(?:ROR|NING|ITICAL)")  # where ``R`` is common: ``re``'s literal search runs in C
MAX_R_MISSES = 32
"""``R`` s that are not a level word after which a span is searched with :data:`LEVEL_RE` instead."""
REPROBE_SPANS = 8
BARE_NEEDLE = b" error:"
"""A literal of every error line without a header (:data:`~engine.vllmlog.grammar.BARE_ERROR_RE`), searched apart
from the level words (one ``re`` alternation of all was 10x slower); its ``:`` makes ``bytes.find`` ~40% cheaper."""


class Needles:
    """The searches of one scan and which letters are common in the current file; spans hold whole lines. Call
    :meth:`start_file` before a file's first span and :meth:`start_span` before each span."""

    def __init__(self) -> None:
        self.many_r = False
        """``R`` is common in this file: the level words are searched with :data:`LEVEL_RE`."""
        self.many_b = False
        """``b`` is common in this file: tracebacks are searched with ``bytes.find`` of the whole needle."""
        self._spans_to_probe = REPROBE_SPANS

    def start_file(self) -> None:
        """A new file: both letters are taken to be rare until seen otherwise."""
        self.many_r = self.many_b = False
        self._spans_to_probe = REPROBE_SPANS

    def start_span(self) -> None:
        """A new span: every :data:`REPROBE_SPANS` spans the letters are taken to be rare again."""
        self._spans_to_probe -= 1
        if self._spans_to_probe <= 0:
            self.start_file()

    def next_level(self, buf: bytes, start: int, stop: int) -> int:
        """Offset of the next level word in ``buf[start:stop]``, -1 if none: ``memchr`` for ``R``, each hit checked
        by its next byte; past :data:`MAX_R_MISSES` misses the rest with :data:`LEVEL_RE`."""
        last = stop - 1  # a newline: the byte after a hit before it exists (and -1 would mean the buffer's end)
        if last <= start:
            return -1
        if not self.many_r:
            find, word_after = buf.find, _WORD_AFTER_R.get
            hit = find(b"R", start + 1, last)
            misses = 0
            while hit >= 0:
                word = word_after(buf[hit + 1])
                if word is not None and hit - word[1] >= start and buf.startswith(word[0], hit - word[1]):
                    return hit - word[1]
                misses += 1
                if misses > MAX_R_MISSES:
                    self.many_r = True
                    start = hit
                    break
                hit = find(b"R", hit + 1, last)
            else:
                return -1
        match = LEVEL_RE.search(buf, start + 1, stop)
        return -1 if match is None else match.start() - (2 if match[0] == b"RNING" else 1)

    def next_traceback(self, buf: bytes, start: int, stop: int) -> int:
        """Offset of the next ``Traceback (most recent`` in ``buf[start:stop]``, -1 if none: ``memchr`` for its rare
        ``b`` (several times faster than ``bytes.find``'s ~2 GB/s), the plain search where ``b`` is common."""
        last = stop - 1  # as in next_level
        if last <= start:
            return -1
        if self.many_b:
            return buf.find(TRACEBACK_NEEDLE, start, stop)
        find = buf.find
        hit = find(b"b", start + _TRACEBACK_B, last)
        misses = 0
        while hit >= 0:
            if buf[hit + 1] == _AFTER_B and buf.startswith(TRACEBACK_NEEDLE, hit - _TRACEBACK_B):
                return hit - _TRACEBACK_B
            misses += 1
            if misses > MAX_B_MISSES:
                self.many_b = True
                return find(TRACEBACK_NEEDLE, hit - _TRACEBACK_B, stop)
            hit = find(b"b", hit + 1, last)
        return -1


class LogScanner:
    """Feeds events and periodic stats of log files to callbacks, oldest file first.

    Args:
        on_event: called with each :class:`ErrorEvent` inside the window (None: errors are not looked for).
        on_metrics: called per block with the stats rows in the window (``METRICS_RE`` groups) and the times of
            the first and last (epoch s or None).
        since_s: window start, epoch s (None: everything); the log is taken to be in time order.
        block_bytes: read size, see :func:`core.logfiles.iter_spans`.
    """

    def __init__(
        self,
        on_event: Callable[[ErrorEvent], None] | None = None,
        on_metrics: MetricsCallback | None = None,
        since_s: float | None = None,
        block_bytes: int = BLOCK_BYTES,
    ) -> None:
        self.on_event = on_event
        self.on_metrics = on_metrics
        self.since_s = since_s
        self.block_bytes = block_bytes
        self.result = ScanResult()
        self._in_window = since_s is None
        self._needles = Needles()
        self._cri = False
        self._last_stamp_s: float | None = None  # of the last stamped line before the current span
        self._tails: list[bytes] = []
        self._clock = StampClock()

    def scan(self, files: Iterable[StrPath]) -> ScanResult:
        """Scan ``files`` in the given (chronological) order and return the counts."""
        for path in files:
            modified_s = mtime_s(path)
            if self.since_s is not None and modified_s is not None and modified_s < self.since_s:
                self.result.skipped_files.append(os.fspath(path))
                continue
            self._clock = StampClock(modified_s)
            self._scan_file(path)
        return self.result

    def _scan_file(self, path: StrPath) -> None:
        """Scan one file: blocks cleaned for stats; for errors alone the raw bytes, CRI partial lines joined only
        around candidate lines (:meth:`_cri_record_at`)."""
        carry = b""
        self._needles.start_file()
        spans = iter_spans(path, self.result.read, self.block_bytes)
        span = next(spans, None)
        while span is not None:
            following = next(spans, None)
            cri = cri_tagged(*span)  # per block, as clean_span decides: one match at its first line
            self._cri = cri and self.on_metrics is None
            if cri and not self._cri and following is not None:
                span, following = hold_partials(span, following, self.block_bytes)
            buf, start, stop = span if self.on_metrics is None else clean_span(*span)
            if carry:  # an unfinished record from the previous block: rare, so the copy is fine
                buf = carry + buf[start:stop]
                start, stop = 0, len(buf)
            carry = self._scan_span(buf, start, stop, final=following is None)
            span = following
        self._stamp_of_last()  # the tails are dated with this file's clock

    def _scan_span(self, buf: bytes, start: int, stop: int, final: bool) -> bytes:
        """Scan the whole lines in ``buf[start:stop]``; returns an unfinished record at the end (to carry over)."""
        if not self._in_window:
            start = self._window_start(buf, start, stop)
            if start < 0:
                return b""
        carry_from = self._scan_errors(buf, start, stop, final) if self.on_event is not None else stop
        if self.on_metrics is not None:
            self.result.lines += buf.count(b"\n", start, carry_from)
            self._count_http(buf, start, carry_from)
            self._scan_metrics(buf, start, carry_from)
        if carry_from > start:
            self._tails.append(buf[max(start, carry_from - _STAMP_LOOKBACK[-1]) : carry_from])
            if len(self._tails) >= _MAX_TAILS:
                self._stamp_of_last()
        return buf[carry_from:stop]

    def _stamp_of_last(self) -> float | None:
        """Time of the last stamped line before the current span (epoch s), from the tails kept since last asked."""
        for tail in reversed(self._tails):
            stamp_s = self._stamp_before(tail, 0, len(tail))
            if stamp_s is not None:
                self._last_stamp_s = stamp_s
                break
        self._tails.clear()
        return self._last_stamp_s

    # --- the --since window ---------------------------------------------------------------------------------------

    def _window_start(self, buf: bytes, start: int, stop: int) -> int:
        """Offset of the first line stamped inside the window, or -1 when the whole span is before it."""
        since_s = self.since_s
        assert since_s is not None
        last_s = self._stamp_before(buf, start, stop)
        if last_s is not None and last_s < since_s:
            self._tails.clear()
            self._last_stamp_s = last_s
            return -1
        for match in STAMP_RE.finditer(buf, start, stop):  # the span ends inside the window (or has no late stamp)
            stamp_s = self._clock.stamp_s(match[1])
            if stamp_s is not None and stamp_s >= since_s:
                self._in_window = True
                return _line_begin(buf, start, match.start())
        return -1

    def _stamp_before(self, buf: bytes, low: int, end: int) -> float | None:
        """Time of the last stamped line in ``buf[low:end]`` (looking back at most 64 KiB), epoch seconds."""
        for lookback in _STAMP_LOOKBACK:  # a wider window has the same last stamp when a narrower one has one
            begin = max(low, end - lookback)
            stamp = last_stamp(buf, begin, end)
            if stamp is not None:
                return self._clock.stamp_s(stamp)  # None when it is no date: so would it be in a wider window
            if begin == low:
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
        if rows:
            first_at = buf.find(METRICS_NEEDLE, start, stop)
            last_at = buf.rfind(METRICS_NEEDLE, start, stop)
            self.on_metrics(rows, self._line_stamp(buf, start, first_at), self._line_stamp(buf, start, last_at))

    def _line_stamp(self, buf: bytes, low: int, position: int) -> float | None:
        """Time stamp of the line holding ``position`` (epoch seconds; None when it has none)."""
        begin = _line_begin(buf, low, position)
        return parse_line(buf[begin : buf.find(b"\n", position)], self._clock).stamp_s

    # --- warnings, errors, tracebacks -----------------------------------------------------------------------------

    def _scan_errors(self, buf: bytes, start: int, stop: int, final: bool) -> int:
        """Report the events in ``buf[start:stop]`` (candidate lines of three literal searches, merged in order);
        returns where an unfinished record begins (``stop``: none)."""
        bare_search = buf.find
        needles = self._needles
        next_level, next_traceback = needles.next_level, needles.next_traceback
        needles.start_span()
        level_at = next_level(buf, start, stop)
        bare_at = bare_search(BARE_NEEDLE, start, stop)
        traceback_at = next_traceback(buf, start, stop)
        while level_at >= 0 or bare_at >= 0 or traceback_at >= 0:
            first = level_at  # the first hit (no list and min(): this runs once per candidate line)
            if bare_at >= 0 and not 0 <= first < bare_at:
                first = bare_at
            if traceback_at >= 0 and not 0 <= first < traceback_at:
                first = traceback_at
            begin = _line_begin(buf, start, first)
            if self._cri:
                begin = logical_line_begin(buf, start, begin)
                end = self._cri_record_at(buf, begin, stop, final)
            else:
                end = self._record_at(buf, begin, stop, final)
            if end < 0:
                return begin
            if 0 <= level_at < end:
                level_at = next_level(buf, end, stop)
            if 0 <= bare_at < end:
                bare_at = bare_search(BARE_NEEDLE, end, stop)
            if 0 <= traceback_at < end:
                traceback_at = next_traceback(buf, end, stop)
        return stop

    def _cri_record_at(self, buf: bytes, begin: int, stop: int, final: bool) -> int:
        """:meth:`_record_at` for the logical line at ``begin`` of a CRI file's raw ``buf``, partial lines joined in a
        growing window; returns the raw offset after the record, -1: unfinished."""
        size = _RECORD_WINDOW_BYTES
        while True:
            window_end = stop
            if begin + size < stop:  # cut after the logical line that holds the window's last byte
                window_end = logical_line_end(buf, _line_begin(buf, begin, begin + size), stop) + 1 or stop
            whole = window_end >= stop
            if whole and not final and is_partial(buf, _line_begin(buf, begin, stop - 1), stop):
                return -1  # the block ends inside a split line: joined with the next block's parts
            joined = join_partials(buf[begin:window_end])
            end = self._record_at(joined, 0, len(joined), final and whole, (buf, begin))
            if end >= 0:
                break
            if whole:
                return -1
            size *= 4
        position = begin  # back to the raw bytes: the record is ``end``'s logical lines
        for _ in range(joined.count(b"\n", 0, end)):
            position = logical_line_end(buf, position, window_end) + 1
        return position

    def _record_at(
        self, buf: bytes, begin: int, stop: int, final: bool, before: tuple[bytes, int] | None = None
    ) -> int:
        """Emit the record at ``begin`` if it is a problem; returns the offset after it, -1: unfinished. ``before``:
        where the lines that date a stampless record end (default ``buf``, ``begin``)."""
        find = buf.find
        end = find(b"\n", begin, stop)
        head = parse_line(buf[begin:end], self._clock)
        is_traceback = starts_traceback(head.body)
        if head.level not in PROBLEM_LEVELS and not is_traceback:
            return end + 1
        tb_lines: list[bytes] = [head.body] if is_traceback else []
        exception: bytes | None = None
        state = "tb" if is_traceback else "head"
        header = head.header if head.level is not None else None  # vLLM repeats it on every line of a record
        position = end + 1
        while True:
            if position >= stop:
                if not final and position - begin < MAX_EVENT_BYTES:
                    return -1  # the record may go on in the next block
                break
            line_end = find(b"\n", position, stop)
            if state == "head" and find(b"Traceback", position, line_end) < 0:
                break  # a record without traceback: most warnings and errors end here, unparsed
            if header is not None and buf.startswith(header, position):
                body = buf[position + len(header) : line_end]
            else:
                line = parse_line(buf[position:line_end], self._clock)
                same_record = header is not None and line.header == header  # its header behind a container stamp
                if not same_record and (line.level is not None or line.process != head.process):
                    break  # another record, or another process's line
                body = line.body
            if state == "tb":
                if not continues_traceback(body) and not starts_traceback(body):
                    exception, state = body, "after"  # the exception line ends a traceback (a chained one may follow)
            elif state == "after" and (continues_traceback(body) or starts_traceback(body)):
                state = "tb"
            elif not starts_traceback(body):
                break
            else:
                state = "tb"
            tb_lines.append(body)
            position = line_end + 1
            if position - begin >= MAX_EVENT_BYTES:
                break
        self._emit(head, is_traceback, tb_lines, exception, *(before or (buf, begin)))
        return position

    def _emit(
        self, head: Line, is_traceback: bool, tb_lines: list[bytes], exception: bytes | None, buf: bytes, begin: int
    ) -> None:
        assert self.on_event is not None
        stamp_s = head.stamp_s
        stamp_before = stamp_s is None
        if stamp_before:  # the nearest stamped line before it, marked as such; none: no time (not the file's mtime)
            stamp_s = self._stamp_before(buf, 0, begin) or self._stamp_of_last()
        if self.since_s is not None and stamp_s is not None and stamp_s < self.since_s:
            return
        if len(tb_lines) > MAX_TRACEBACK_LINES:
            half = MAX_TRACEBACK_LINES // 2
            tb_lines = [*tb_lines[:half], b"    ...", *tb_lines[-half:]]
        exception_text = text(exception).strip() if exception is not None else None
        message = text(head.body).strip()
        if is_traceback:
            message = exception_text or message
        level = head.level if head.level is not None and head.level in PROBLEM_LEVELS else "ERROR"
        self.on_event(
            ErrorEvent(level, stamp_s, head.proc, head.src, message, exception_text, tb_lines, stamp_before)
        )
