"""vLLM log line formats, parsed from bytes.

Recognised headers (each optional, after an optional process prefix ``(EngineCore_DP0 pid=123) ``):

- vLLM >= 0.6: ``INFO 11-29 21:55:01 [utils.py:253] message``
- older vLLM: ``INFO 05-01 12:00:00 llm_engine.py:123] message`` (no ``[`` before the file name)
- uvicorn: ``ERROR:    Exception in ASGI application``
- this project's launcher: ``[ERROR] message``

Everything else (tracebacks, tqdm bars, warnings from Python, garbage) is a line with no header.
"""

from __future__ import annotations

import re

from core.timeparse import StampClock

VLLM_HEADER_RE = re.compile(
    rb"(\(([^()\s]{1,64}) pid=\d{1,10}\) )?(WARNING|ERROR|INFO|DEBUG|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? "
    rb"\[?([^\]\s]{0,200})\] ?"
)
"""vLLM's header (groups: prefix, process name, level, stamp, source); tried first, it is most lines' format."""
OTHER_HEADER_RE = re.compile(
    rb"(\(([^()\s]{1,64}) pid=\d{1,10}\) )?"
    rb"(?:(WARNING|ERROR|INFO|DEBUG|CRITICAL):\s+|\[(WARNING|ERROR|INFO|DEBUG|CRITICAL)\] )?"
)
"""Prefix and uvicorn or launcher level, each optional: always matches (possibly empty)."""

STAMP_RE = re.compile(rb"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)")
"""Finds a vLLM stamp anywhere (used to date lines that have none, from the lines before them)."""

PROBLEM_LEVELS = frozenset({"WARNING", "ERROR", "CRITICAL"})
_LEVELS = {name.encode(): name for name in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")}
MAX_TEXT_CHARS = 2000
"""Longest message or traceback line kept, in characters (longer ones are cut and end with an ellipsis)."""


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
        """Process name of the prefix (``EngineCore_DP0``), None without prefix."""
        self.level = level
        self.stamp_s = stamp_s
        """Epoch seconds of vLLM's stamp, None when the line has none."""
        self.src = src
        """``file.py:line`` of vLLM's header."""
        self.body = body
        self.header = header
        """Prefix and header bytes exactly as written (lines of one multi-line log call share them)."""
        self.process = process
        """The raw process prefix (``b"(EngineCore pid=2630) "`` or ``b""``)."""


def parse_line(raw: bytes, clock: StampClock) -> Line:
    """Parse one line (without its newline). Never raises; unknown text gives a Line with no level."""
    match = VLLM_HEADER_RE.match(raw)
    if match is not None:
        prefix, proc, level_b, stamp, src = match.groups()
    else:
        match = OTHER_HEADER_RE.match(raw)
        assert match is not None  # the pattern matches the empty string
        prefix, proc, ulevel, blevel = match.groups()
        level_b, stamp, src = ulevel or blevel, None, None
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


_NORMALISE_RE = re.compile(r"[a-fA-F]*+\d[\w.:-]*")
"""A token with a digit in it (number, version, hex id, UUID, ``file.py:12``) and what sticks to it."""


def normalise(message: str) -> str:
    """Message with tokens holding digits (numbers, hex ids, UUIDs) replaced by ``#``, so repeats of one problem share
    a group key (only the first 200 characters count)."""
    return _NORMALISE_RE.sub("#", message[:200])


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
"""The engine's periodic stats line, old (``Running/Swapped/Pending``, GPU then CPU-swap KV cache) and new
(``Engine 000: ... Running/Waiting``, one KV cache figure named after the device, prefix cache hit rate). Starts
with a literal so that ``findall`` over a whole block is fast; fields a version lacks come back empty."""
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
