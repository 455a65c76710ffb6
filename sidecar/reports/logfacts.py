"""The report's ``logs`` section: vLLM's WARNING/ERROR records inside a run's window (:mod:`engine.vllmlog.grammar`),
from the log's last ``max_bytes``."""

from __future__ import annotations

from pathlib import Path

from core.logfiles import ReadStats, iter_spans, mtime_s
from core.parsing import StampClock
from core.report_schema import LogFacts
from engine.vllmlog.grammar import PROBLEM_LEVELS, clean, clean_span, parse_line, text

MAX_EXAMPLES = 50
MAX_LINE_CHARS = 500
_NEEDLES = (b"WARNING", b"ERROR", b"CRITICAL")


def read_log_facts(
    path: Path, window_start: float | None = None, window_end: float | None = None, max_bytes: int = 16 << 20
) -> LogFacts:
    """WARNING/ERROR/CRITICAL records of ``path`` stamped in the window (epoch s, 1 s of slack), once per record, at
    most :data:`MAX_EXAMPLES` per kind; never raises (a missing log: ``found`` False)."""
    stats = ReadStats()
    spans = iter_spans(path, stats, last_bytes=max_bytes)
    facts = LogFacts(log_file=str(path), found=False)
    if window_start is None:
        facts.found = path.is_file()
        return facts
    clock = StampClock(mtime_s(path))
    last_header = b""
    for span in spans:
        buf, start, stop = clean_span(*span)
        if not any(buf.find(needle, start, stop) >= 0 for needle in _NEEDLES):
            last_header = b""  # a block of INFO lines (most of a serving log): nothing to look at, line by line
            continue
        lines = buf[start:stop].split(b"\n")
        lines.pop()
        for raw in lines:
            if not any(needle in raw for needle in _NEEDLES):
                last_header = b""  # another record came between
                continue
            line = parse_line(raw, clock)
            if line.level not in PROBLEM_LEVELS or line.stamp_s is None or line.header == last_header:
                continue
            last_header = line.header  # the next lines of this record share it
            if not window_start - 1 <= line.stamp_s <= (window_end or line.stamp_s) + 1:
                continue
            bucket = facts.warnings_in_window if line.level == "WARNING" else facts.errors_in_window
            if len(bucket) < MAX_EXAMPLES:
                bucket.append(text(clean(raw), MAX_LINE_CHARS).strip())
    facts.found = bool(stats.files)
    return facts
