"""vLLM's log line grammar, the one place it is written down.

A line, outside in (every part optional): a container stamp (``docker logs -t``'s ``2026-11-29T21:55:01.123456789Z ``,
or a CRI file's ``… stdout F ``, ``P`` for a partial line); vLLM's process prefix (``(APIServer pid=123)
``, ``(Worker_TP1 pid=…) ``, ``(VllmWorker rank=2 pid=…) ``, Ray's ``(… pid=…, ip=…) ``; ``_add_prefix`` in
``vllm/utils/system_utils.py``); a header (vLLM ``INFO 11-29 21:55:01 [utils.py:253] ``, older
``… llm_engine.py:123] ``, uvicorn ``ERROR:    ``, the launcher's ``[ERROR] ``; argparse's ``prog: error: …`` and
``Fatal Python error: …`` count as ERROR lines, :data:`BARE_ERROR_RE`); the message. Multi-line messages repeat prefix
and header. ANSI colours may wrap any part; :func:`clean` and :func:`clean_span` remove stamps and colours. Sources:
``vllm/logger.py``, ``vllm/logging_utils/formatter.py``, vLLM's bug reports.

The engine's periodic stats line is here too; which messages carry start-up facts is :mod:`engine.vllmlog.tracker`'s
(kept apart so that the log analyzer, which needs only this module, starts fast).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.logfiles import Span
from core.parsing import StampClock

# --- the line ---------------------------------------------------------------------------------------------------

ANSI_RE = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)")
"""ANSI escape sequences: CSI (colours) and OSC."""
_CONTAINER_STAMP = rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
CONTAINER_RE = re.compile(_CONTAINER_STAMP + rb" (?:(?:stdout|stderr) [FP] )?")
"""A container runtime's stamp (Docker ``-t``; CRI with stream and full/partial tag)."""

PREFIX = rb"(\((?:([^()\s]{1,64}(?: rank=\d{1,6})?) )?pid=\d{1,10}(?:, ip=[\w.:\-]{1,64})?\) )?"
"""vLLM's process prefix (groups: the whole prefix, the process name with its rank if any)."""
LEVELS = (b"DEBUG", b"INFO", b"WARNING", b"ERROR", b"CRITICAL")
VLLM_HEADER_RE = re.compile(
    PREFIX + rb"(WARNING|ERROR|INFO|DEBUG|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? \[?([^\]\s]{0,200})\] ?"
)
"""Prefix and vLLM's header (groups: prefix, process, level, stamp, source); tried first, most lines have it."""
OTHER_HEADER_RE = re.compile(
    PREFIX + rb"(?:(WARNING|ERROR|INFO|DEBUG|CRITICAL):\s+|\[(WARNING|ERROR|INFO|DEBUG|CRITICAL)\] )?"
)
"""Prefix and uvicorn or launcher level, each optional: always matches (possibly empty)."""
_SGR = rb"(?:\x1b\[[0-9;]*m)*"
STAMP_RE = re.compile(rb"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)" + _SGR + rb" " + _SGR + rb"(\d\d-\d\d \d\d:\d\d:\d\d)")
"""A vLLM stamp anywhere, also between colour codes (dates unstamped lines, finds ``--since`` windows)."""
_STAMP_STARTS = tuple(level + after for level in LEVELS for after in (b" ", b"\x1b"))
"""How every :data:`STAMP_RE` match starts: a level word, then a space or an escape."""


def last_stamp(buf: bytes, begin: int, end: int) -> bytes | None:
    """The stamp (``MM-DD HH:MM:SS``) of the last :data:`STAMP_RE` match in ``buf[begin:end]``, or None.

    Searched from the end with ``rfind`` for :data:`_STAMP_STARTS` (far cheaper than ``finditer`` from the front);
    matches cannot overlap, so the last start that matches is the last match."""
    rfind = buf.rfind
    hits = [rfind(start, begin, end) for start in _STAMP_STARTS]
    while True:
        at = max(hits)
        if at < 0:
            return None
        match = STAMP_RE.match(buf, at, end)
        if match is not None:
            return match[1]
        index = hits.index(at)
        hits[index] = rfind(_STAMP_STARTS[index], begin, at + len(_STAMP_STARTS[index]) - 1)  # one that starts before


BARE_ERROR_RE = re.compile(rb"(?:([\w.\-]{1,64}(?: [\w\-]{1,32})?): error: |Fatal Python error: )")
"""Error lines without a header (group: argparse's program name): argparse's ``<prog>: error: …``
before it exits 2, and CPython's ``Fatal Python error: …``."""
BARE_ERROR_NEEDLES = (b": error: ", b"Fatal Python error: ")
"""Substrings every :data:`BARE_ERROR_RE` line has (cheap tests first)."""
_BARE_ARGPARSE, _BARE_FATAL = BARE_ERROR_NEEDLES

PROBLEM_LEVELS = frozenset({"WARNING", "ERROR", "CRITICAL"})
_LEVELS = {name: name.decode() for name in LEVELS}
MAX_TEXT_CHARS = 2000
"""Longest message kept, in characters (longer ones end with an ellipsis)."""


def join_partials(data: bytes) -> bytes:
    """``data`` (whole CRI lines) with each partial line (``P``) joined to its continuation, whose stamp
    and tag go; a part at the very end stays a line. Other lines keep their stamps (:func:`parse_line` removes
    them), so a block costs one search, not a rewrite."""
    pieces: list[bytes] = []
    kept, end = 0, len(data)  # data[kept:] is not yet in pieces
    at = data.find(b" P ")
    while at >= 0:
        begin = data.rfind(b"\n", 0, at) + 1
        tag = CONTAINER_RE.match(data, begin, at + 3)
        newline = data.find(b"\n", at)
        if begin < kept or tag is None or tag.end() != at + 3 or newline < 0 or newline + 1 >= end:
            at = data.find(b" P ", at + 3)
            continue
        pieces += [data[kept:begin], data[tag.end() : newline]]
        kept = newline + 1
        while (following := CONTAINER_RE.match(data, kept)) is not None:
            kept = following.end()  # the continuation's stamp and tag go; its text follows the part
            if data[kept - 2 : kept - 1] != b"P":
                break
            newline = data.find(b"\n", kept)
            if newline < 0 or newline + 1 >= end:
                break  # a part at the very end stays as it is
            pieces.append(data[kept:newline])
            kept = newline + 1
        at = data.find(b" P ", kept)
    pieces.append(data[kept:])
    return b"".join(pieces)


def cri_tagged(buf: bytes, start: int, stop: int) -> bool:
    """True when the line at ``start`` has a CRI stamp with stream and tag (``… stdout F ``)."""
    if not buf[start : start + 1].isdigit():
        return False
    first = CONTAINER_RE.match(buf, start, min(stop, start + 80))
    return first is not None and buf[first.end() - 2 : first.end() - 1] in (b"F", b"P")


def is_partial(buf: bytes, line_begin: int, stop: int) -> bool:
    """True when the line at ``line_begin`` is a CRI partial part (``… stdout P ``)."""
    tag = CONTAINER_RE.match(buf, line_begin, min(stop, line_begin + 80))
    return tag is not None and buf[tag.end() - 2 : tag.end()] == b"P "


def logical_line_end(buf: bytes, position: int, stop: int) -> int:
    """Offset of the newline ending the logical line that holds the physical line at ``position`` in
    ``buf[:stop]`` (partial parts go on; the last line before ``stop`` ends its own); -1 without one."""
    newline = buf.find(b"\n", position, stop)
    while 0 <= newline < stop - 1 and is_partial(buf, position, stop):
        position = newline + 1
        newline = buf.find(b"\n", position, stop)
    return newline


def logical_line_begin(buf: bytes, low: int, line_begin: int) -> int:
    """Where the logical line holding the line at ``line_begin`` begins (not before ``low``)."""
    while line_begin > low:
        before = buf.rfind(b"\n", low, line_begin - 1) + 1 or low
        if not is_partial(buf, before, line_begin):
            break
        line_begin = before
    return line_begin


def hold_partials(span: Span, following: Span, block_bytes: int) -> tuple[Span, Span]:
    """Move the logical line that ``span``'s trailing partial parts begin to the front of ``following``
    (consecutive spans of a CRI file), so :func:`clean_span` joins it; unchanged when longer than a block."""
    buf, start, stop = span
    last = buf.rfind(b"\n", start, stop - 1) + 1 or start
    if not is_partial(buf, last, stop):
        return span, following
    cut = logical_line_begin(buf, start, last)
    if stop - cut > block_bytes:
        return span, following
    joined = buf[cut:stop] + following[0][following[1] : following[2]]
    return (buf, start, cut), (joined, 0, len(joined))


def _has_partial(buf: bytes, start: int, stop: int) -> bool:
    """True when ``buf[start:stop]`` of a CRI file holds a partial line (`` stdout P ``)."""
    if not cri_tagged(buf, start, stop):
        return False
    at = buf.find(b" P ", start, stop)
    while at >= 0:
        if buf[at - 6 : at] in (b"stdout", b"stderr"):
            return True
        at = buf.find(b" P ", at + 3, stop)
    return False


def clean_span(buf: bytes, start: int, stop: int, colours: bool = True) -> tuple[bytes, int, int]:
    """``buf[start:stop]`` (whole lines) as ``(buffer, start, stop)`` without ANSI codes (unless
    ``colours=False``) and with CRI partial lines joined; other stamps stay (:func:`parse_line` removes them).
    Returned uncopied when there is nothing to do."""
    coloured = colours and buf.find(b"\x1b", start, stop) >= 0
    partial = buf[start : start + 1].isdigit() and _has_partial(buf, start, stop)
    if not coloured and not partial:
        return buf, start, stop
    data = buf[start:stop]
    if partial:
        data = join_partials(data)
    if coloured:
        data = ANSI_RE.sub(b"", data)
    return data, 0, len(data)


def clean(raw: bytes) -> bytes:
    """One line without its container stamp and ANSI codes."""
    if raw[:1].isdigit() and (match := CONTAINER_RE.match(raw)) is not None:
        raw = raw[match.end() :]
    return ANSI_RE.sub(b"", raw) if raw.find(b"\x1b") >= 0 else raw


@dataclass(slots=True)
class Line:
    """One parsed log line: process prefix, level, time, source ``file.py:line`` and the message body."""

    proc: str | None
    """The prefix's process with its rank (``EngineCore_DP0``, ``VllmWorker rank=2``); None without."""
    level: str | None
    stamp_s: float | None
    """Epoch seconds of vLLM's stamp; None without."""
    src: str | None
    body: bytes
    header: bytes
    """Prefix and header bytes as written (lines of one multi-line log call share them)."""
    process: bytes
    """The raw process prefix (``b"(EngineCore pid=2630) "`` or ``b""``)."""


def parse_line(raw: bytes, clock: StampClock) -> Line:
    """Parse one line (no newline; stamps and colours removed first); never raises: unknown text has no level."""
    # ``find``, not ``in``: ``bytes in bytes`` tries the operand as an int first (a TypeError, made and dropped)
    if raw[:1].isdigit() or raw.find(b"\x1b") >= 0:
        raw = clean(raw)
    match = VLLM_HEADER_RE.match(raw)
    if match is not None:
        prefix, proc, level_b, stamp, src = match.groups()
    else:
        match = OTHER_HEADER_RE.match(raw)
        assert match is not None  # the pattern matches the empty string
        prefix, proc, ulevel, blevel = match.groups()
        level_b, stamp, src = ulevel or blevel, None, None
        if level_b is None and not prefix and (raw.find(_BARE_ARGPARSE) >= 0 or raw.find(_BARE_FATAL) >= 0):
            bare = BARE_ERROR_RE.match(raw)
            if bare is not None:  # the whole line is the message; argparse's program name is the source
                return Line(None, "ERROR", None, bare[1].decode("utf-8", "replace") if bare[1] else None, raw, b"", b"")
    end = match.end()
    return Line(
        proc.decode("ascii", "replace") if proc else None,
        _LEVELS[level_b] if level_b else None,
        clock.stamp_s(stamp) if stamp else None,
        src.decode("utf-8", "replace") if src else None,
        raw[end:],
        raw[:end],
        prefix or b"",
    )


def text(raw: bytes, limit_chars: int = MAX_TEXT_CHARS) -> str:
    """Bytes of a log line as printable text: undecodable bytes replaced, control characters dropped, cut to size."""
    decoded = raw.decode("utf-8", "replace").rstrip("\r")
    if not decoded.isprintable():
        decoded = "".join(ch if ch.isprintable() or ch == "\t" else "\ufffd" for ch in decoded)
    return decoded if len(decoded) <= limit_chars else decoded[: limit_chars - 1] + "…"


NORMALISE_PATTERN = r"[a-fA-F]*+\d[\w.:-]*"
"""A token with a digit in it and what sticks to it: what :func:`normalise` replaces."""
_DIGIT_RE, _DIGIT_ASCII_RE = re.compile(r"\d"), re.compile(r"[0-9]")
_TOKEN_REST_RE, _TOKEN_REST_ASCII_RE = re.compile(r"[\w.:-]*"), re.compile(r"[\w.:-]*", re.ASCII)
_HEX_LETTERS = frozenset("abcdefABCDEF")


def normalise(message: str) -> str:
    """Message with tokens holding digits (numbers, hex ids, UUIDs) replaced by ``#``, so repeats of one
    problem share a group key (first 200 characters only).

    Equal to ``re.sub(NORMALISE_PATTERN, "#", message[:200])`` but jumps from digit to digit (``re`` has no literal
    to skip to); ASCII text takes the faster ASCII patterns."""
    head = message[:200]
    ascii_only = head.isascii()
    search = (_DIGIT_ASCII_RE if ascii_only else _DIGIT_RE).search
    rest = (_TOKEN_REST_ASCII_RE if ascii_only else _TOKEN_REST_RE).match
    digit = search(head)
    if digit is None:
        return head
    pieces = []
    done = 0
    while digit is not None:
        begin = at = digit.start()
        while begin > done and head[begin - 1] in _HEX_LETTERS:
            begin -= 1
        pieces.append(head[done:begin])
        tail = rest(head, at + 1)  # matches always (maybe empty)
        done = tail.end() if tail is not None else at + 1
        digit = search(head, done)
    pieces.append(head[done:])
    return "#".join(pieces)


# --- traceback lines ------------------------------------------------------------------------------------------------

TB_START = (b"Traceback (most recent call last):", b"Exception Group Traceback (most recent call last):")
TB_JOINERS = (
    b"During handling of the above exception, another exception occurred:",
    b"The above exception was the direct cause of the following exception:",
)


def starts_traceback(body: bytes) -> bool:
    """True for ``Traceback (most recent call last):`` (also the indented exception-group form)."""
    stripped = body.lstrip(b" \t+|")
    return stripped.startswith(TB_START)


def continues_traceback(body: bytes) -> bool:
    """True for a traceback's inner lines: indented frames and code, blank lines, chaining sentences."""
    return not body.strip() or body[:1] in (b" ", b"\t", b"|", b"+") or body.startswith(TB_JOINERS)


# --- engine's periodic stats line -----------------------------------------------------------------------------------

METRICS_RE = re.compile(
    rb"Avg prompt throughput: (\d+(?:\.\d+)?) tokens/s, Avg generation throughput: (\d+(?:\.\d+)?) tokens/s"
    rb"(?:, Running: (\d+) reqs)?(?:, Swapped: (\d+) reqs)?(?:, (?:Pending|Waiting): (\d+) reqs)?"
    rb"(?:, (\w+) KV cache usage: (\d+(?:\.\d+)?)%)?(?:[^\n]*?Prefix cache hit rate: (\d+(?:\.\d+)?)%)?"
)
"""The engine's periodic stats line (``vllm/v1/metrics/loggers.py``), old (Running/Swapped/Pending) and new (``Engine
000: …`` Running/Waiting, KV cache named after the device, prefix cache hit rate); missing fields come back empty."""
METRICS_NEEDLE = b"Avg prompt throughput: "
METRIC_FIELDS = (
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "running_reqs",
    "swapped_reqs",
    "waiting_reqs",
    "kv_cache_device",
    "kv_cache_usage_pct",
    "prefix_cache_hit_rate_pct",
)
"""Names (units in them) of :data:`METRICS_RE`'s groups, in order."""
