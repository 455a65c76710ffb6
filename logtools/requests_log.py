"""Streaming reader of ``logs/requests.jsonl`` (:mod:`core.requestlog`) that counts bad lines instead of failing."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from core.logfiles import BLOCK_BYTES, ReadStats, StrPath, iter_blocks
from core.requestlog import BadLogLine, RequestLogLine
from engine.vllmlog.grammar import text

MAX_BAD_EXAMPLES = 5


@dataclass
class RequestsRead:
    """Counts of one read of the requests log: valid records, bad lines (with examples) and file facts."""

    read: ReadStats = field(default_factory=ReadStats)
    records: int = 0
    bad_lines: int = 0
    bad_examples: list[str] = field(default_factory=list)
    before_window: int = 0


def iter_records(
    files: Iterable[StrPath], counts: RequestsRead, since_s: float | None = None, block_bytes: int = BLOCK_BYTES
) -> Iterator[RequestLogLine]:
    """Valid records of ``files`` (oldest first) ending at or after ``since_s`` (epoch s; None: all); bad lines
    counted in ``counts`` with ``file:line: reason`` examples."""
    for path in files:
        line_number = 0
        for block in iter_blocks(path, counts.read, block_bytes):
            lines = block.split(b"\n")
            lines.pop()  # a block ends with a newline: the last piece is empty
            for raw in lines:
                line_number += 1
                if not raw.strip():
                    continue
                try:
                    record = RequestLogLine.parse(raw)
                except BadLogLine as exc:
                    counts.bad_lines += 1
                    if len(counts.bad_examples) < MAX_BAD_EXAMPLES:
                        counts.bad_examples.append(f"{os.path.basename(path)}:{line_number}: {exc} — {text(raw, 80)}")
                    continue
                if since_s is not None and record.end_s < since_s:
                    counts.before_window += 1
                    continue
                counts.records += 1
                yield record


def feed(records: Iterable[RequestLogLine], *consumers: Callable[[RequestLogLine], None]) -> None:
    """Pass every record to each consumer (aggregators' ``add``)."""
    for record in records:
        for consume in consumers:
            consume(record)
