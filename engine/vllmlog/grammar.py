"""vLLM's log line grammar, the one place it is written down: how a line is built.

A line, outside in (every part optional):

- a container stamp: ``2026-11-29T21:55:01.123456789Z `` (``docker logs -t``, ``kubectl logs --timestamps``) or
  ``2026-11-29T21:55:01.123456789+00:00 stdout F `` (Kubernetes/CRI log files; ``P`` marks a line split in parts);
- a process prefix, written by vLLM's ``_add_prefix`` (``vllm/utils/system_utils.py``): ``(APIServer pid=123) ``,
  ``(EngineCore_DP0 pid=…) ``, ``(Worker_TP1 pid=…) ``, ``(Worker_PP0_TP1 pid=…) ``, ``(VllmWorker rank=2 pid=…) ``,
  ``(VllmWorkerProcess pid=…) ``, Ray's ``(RayWorkerWrapper pid=…, ip=10.0.0.2) `` and ``(pid=…) ``;
- a header: vLLM >= 0.6 ``INFO 11-29 21:55:01 [utils.py:253] `` (with ``VLLM_LOGGING_LEVEL=DEBUG`` the source is a
  path, ``[v1/engine/core.py:936]``), older vLLM ``INFO 05-01 12:00:00 llm_engine.py:123] ``, uvicorn
  ``ERROR:    ``, this project's launcher ``[ERROR] ``;
  lines with no header that still say a start failed get a level: argparse's ``api_server.py: error: unrecognized
  arguments: --max-num-seqz`` (after its ``usage: …`` block; ``vllm serve: error: …``) and CPython's ``Fatal Python
  error: Segmentation fault`` are ERROR lines (:data:`BARE_ERROR_RE`; the source is argparse's program name);
- the message. Lines of one multi-line message repeat the prefix and header (vLLM's ``NewLineFormatter``, which also
  ends them with ``\\r``).

ANSI colour codes may wrap any part: vLLM colours the prefix cyan and, on a terminal or with
``VLLM_LOGGING_COLOR=1``, the level by severity and the stamp and source grey (``ColoredFormatter``). Container
stamps and colour codes are removed before a line is parsed (:func:`clean`; :func:`clean_span` for whole blocks).
Sources: ``vllm/logger.py`` (format ``%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s``, date
``%m-%d %H:%M:%S``), ``vllm/logging_utils/formatter.py``, the process names of ``v1/executor/multiproc_executor.py``
and ``v1/engine/core.py``, and logs posted in vLLM's bug reports.

Everything else (tracebacks, tqdm bars, Python warnings, garbage) is a line with no header. The engine's periodic
stats line is described here too; which messages carry the start-up facts (version, load times, KV cache, ready,
fatal errors) and the phases they lead to are :mod:`engine.vllmlog.tracker`'s (kept apart so that the log analyzer,
which needs only this module, starts fast); :mod:`engine.vllmlog.startup` reads them from a log family.
"""

from __future__ import annotations

import re

from core.logfiles import Span
from core.timeparse import StampClock

# --- the line ---------------------------------------------------------------------------------------------------

ANSI_RE = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)")
"""ANSI escape sequences: CSI (colours, ``\\x1b[0;36m``) and OSC (``\\x1b]…\\x07``)."""
_CONTAINER_STAMP = rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
CONTAINER_RE = re.compile(_CONTAINER_STAMP + rb" (?:(?:stdout|stderr) [FP] )?")
"""A container runtime's stamp in front of the line (Docker ``-t``; CRI with stream and full/partial tag)."""

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
"""Finds a vLLM stamp anywhere, also between colour codes (used to date lines that have none, from the lines before
them, and to find where a ``--since`` window starts without parsing every line)."""
_STAMP_STARTS = tuple(level + after for level in LEVELS for after in (b" ", b"\x1b"))
"""How every :data:`STAMP_RE` match starts: a level word, then a space or a colour code's escape."""


def last_stamp(buf: bytes, begin: int, end: int) -> bytes | None:
    """The stamp (``MM-DD HH:MM:SS``) of the last :data:`STAMP_RE` match in ``buf[begin:end]``, None without one.

    Searched from the end: the starts of a match (:data:`_STAMP_STARTS`) are found with ``rfind`` (a few
    instructions a byte; ``STAMP_RE.finditer`` from the front costs ~60, its first byte being one of five letters),
    the last of them that matches is the last match (matches cannot overlap: no level word fits inside one)."""
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
"""Error lines without a header (groups: argparse's program name): ``<prog>: error: <message>``, argparse's last
line before it exits with status 2 (``ArgumentParser.error``; vLLM's ``FlexibleArgumentParser`` keeps it), and
``Fatal Python error: …`` (CPython's ``faulthandler``, a crashed interpreter)."""
BARE_ERROR_NEEDLES = (b": error: ", b"Fatal Python error: ")
"""Substrings every :data:`BARE_ERROR_RE` line has (cheap tests before the pattern)."""
_BARE_ARGPARSE, _BARE_FATAL = BARE_ERROR_NEEDLES

PROBLEM_LEVELS = frozenset({"WARNING", "ERROR", "CRITICAL"})
_LEVELS = {name: name.decode() for name in LEVELS}
MAX_TEXT_CHARS = 2000
"""Longest message or traceback line kept, in characters (longer ones are cut and end with an ellipsis)."""


def join_partials(data: bytes) -> bytes:
    """``data`` (whole CRI lines) with each partial line (``P``) joined to its continuation (whose stamp and tag go);
    a part at the very end stays a line of its own. Only the partial lines are touched (found through `` P ``, one
    search); the other lines keep their stamps (:func:`parse_line` removes them), so a block with a long line split
    by the runtime costs one search, not a rewrite of every line. The lines of the result are the logical lines
    :func:`logical_line_end` walks."""
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
    """True when the line at ``start`` has a CRI stamp with stream and tag (``… stdout F ``): a Kubernetes log file,
    whose lines may be split in parts; a ``docker logs -t`` stamp has no tag."""
    if not buf[start : start + 1].isdigit():
        return False
    first = CONTAINER_RE.match(buf, start, min(stop, start + 80))
    return first is not None and buf[first.end() - 2 : first.end() - 1] in (b"F", b"P")


def is_partial(buf: bytes, line_begin: int, stop: int) -> bool:
    """True when the line starting at ``line_begin`` is a CRI partial part (``… stdout P ``): it goes on in the next
    line (a stamp never ends with ``P``, so an untagged stamp is never taken for one)."""
    tag = CONTAINER_RE.match(buf, line_begin, min(stop, line_begin + 80))
    return tag is not None and buf[tag.end() - 2 : tag.end()] == b"P "


def logical_line_end(buf: bytes, position: int, stop: int) -> int:
    """Offset of the newline that ends the logical line holding the physical line at ``position`` in
    ``buf[:stop]`` (whole lines): a partial part goes on in the next line, as :func:`join_partials` joins them, and
    the last line before ``stop`` ends its logical line. -1 when no newline follows ``position``."""
    newline = buf.find(b"\n", position, stop)
    while 0 <= newline < stop - 1 and is_partial(buf, position, stop):
        position = newline + 1
        newline = buf.find(b"\n", position, stop)
    return newline


def logical_line_begin(buf: bytes, low: int, line_begin: int) -> int:
    """Where the logical line holding the physical line at ``line_begin`` begins, not before ``low``: back over the
    partial parts in front of it."""
    while line_begin > low:
        before = buf.rfind(b"\n", low, line_begin - 1) + 1 or low
        if not is_partial(buf, before, line_begin):
            break
        line_begin = before
    return line_begin


def hold_partials(span: Span, following: Span, block_bytes: int) -> tuple[Span, Span]:
    """``span`` without the logical line its partial parts at the end begin, and ``following`` with it in front, so
    that whole-block joining (:func:`clean_span`) joins it: for a CRI file's consecutive spans (:data:`Span`);
    unchanged when there is none or it is longer than a block (cut there, as over-long lines are)."""
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
    """True when ``buf[start:stop]`` (starting with a container stamp) holds a CRI partial line (`` stdout P ``).

    Only CRI files have the stream tag; a ``docker logs -t`` block (none after its first stamp) is not searched, and
    a CRI block is searched once for `` P `` (each hit checked for its stream name) rather than once per stream."""
    if not cri_tagged(buf, start, stop):
        return False
    at = buf.find(b" P ", start, stop)
    while at >= 0:
        if buf[at - 6 : at] in (b"stdout", b"stderr"):
            return True
        at = buf.find(b" P ", at + 3, stop)
    return False


def clean_span(buf: bytes, start: int, stop: int, colours: bool = True) -> tuple[bytes, int, int]:
    """``buf[start:stop]`` (whole lines) without ANSI codes, and with the parts of Kubernetes' split lines (``P``)
    joined, as ``(buffer, start, stop)``; other container stamps stay (:func:`parse_line` removes them per line,
    which is cheaper than rewriting every line of a block).

    The span comes back unchanged, without a copy, when there is nothing to do (``memchr`` for ESC, a substring
    search for the partial tag). ``colours=False`` leaves colour codes too, for readers that only parse a few lines
    (removing them costs ~0.4 µs per code).
    """
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


class Line:
    """One parsed log line: process prefix, level, time, source ``file.py:line`` and the message body."""

    __slots__ = ("body", "header", "level", "proc", "process", "src", "stamp_s")

    def __init__(
        self,
        proc: str | None,
        level: str | None,
        stamp_s: float | None,
        src: str | None,
        body: bytes,
        header: bytes,
        process: bytes,
    ) -> None:
        self.proc = proc
        """Process of the prefix with its rank, if any (``EngineCore_DP0``, ``VllmWorker rank=2``); None without."""
        self.level = level
        self.stamp_s = stamp_s
        """Epoch seconds of vLLM's stamp, None when the line has none."""
        self.src = src
        """``file.py:line`` of vLLM's header."""
        self.body = body
        self.header = header
        """Prefix and header bytes as written (lines of one multi-line log call share them)."""
        self.process = process
        """The raw process prefix (``b"(EngineCore pid=2630) "`` or ``b""``)."""


def parse_line(raw: bytes, clock: StampClock) -> Line:
    """Parse one line (without its newline; container stamps and colours are removed first). Never raises; unknown
    text gives a Line with no level."""
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
"""A token with a digit in it (number, version, hex id, UUID, ``file.py:12``) and what sticks to it: what
:func:`normalise` replaces (it finds the same spans as ``re.sub`` of this pattern, faster)."""
_DIGIT_RE, _DIGIT_ASCII_RE = re.compile(r"\d"), re.compile(r"[0-9]")
_TOKEN_REST_RE, _TOKEN_REST_ASCII_RE = re.compile(r"[\w.:-]*"), re.compile(r"[\w.:-]*", re.ASCII)
_HEX_LETTERS = frozenset("abcdefABCDEF")


def normalise(message: str) -> str:
    """Message with tokens holding digits (numbers, hex ids, UUIDs) replaced by ``#``, so repeats of one problem share
    a group key (only the first 200 characters count).

    The result is ``re.sub(NORMALISE_PATTERN, "#", message[:200])``; ``re`` would try the pattern at every character
    (it has no literal to skip to: ~250 instructions a character), this goes from digit to digit: a match begins at
    the run of hex letters just before a digit and ends where ``[\\w.:-]`` ends. ASCII text (most) takes ASCII
    patterns, which match it alike and test a character against a bit map instead of Unicode's tables."""
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
"""The engine's periodic stats line (``vllm/v1/metrics/loggers.py``), old (``Running/Swapped/Pending``, GPU then
CPU-swap KV cache) and new (``Engine 000: ... Running/Waiting``, one KV cache figure named after the device, prefix
cache hit rate). Starts with a literal so that ``findall`` over a whole block is fast; fields a version lacks come
back empty."""
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


def parse_metrics(body: bytes) -> dict[str, float]:
    """Numbers of one periodic stats line by :data:`METRIC_FIELDS` name (absent fields left out)."""
    match = METRICS_RE.search(body)
    if match is None:
        return {}
    return {
        name: float(value)
        for name, value in zip(METRIC_FIELDS, match.groups(), strict=True)
        if value and name != "kv_cache_device"
    }
