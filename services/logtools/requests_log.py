"""Streaming reader of ``logs/requests.jsonl`` (format: :mod:`core.requestlog`) that never fails on bad lines.

Validated by hand rather than with the pydantic model so that the analyzer starts fast; a line that is not a JSON
object with the documented fields and types is counted as bad, with the first few reasons kept.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from services.logtools.aggregate import RequestRecord
from services.logtools.patterns import text
from services.logtools.reader import BLOCK_BYTES, ReadStats, StrPath, iter_blocks
from services.logtools.timeparse import iso_to_epoch_s

MAX_BAD_EXAMPLES = 5


@dataclass
class RequestsRead:
    """Counts of one read of the requests log: valid records, bad lines (with examples) and file facts."""

    read: ReadStats = field(default_factory=ReadStats)
    records: int = 0
    bad_lines: int = 0
    bad_examples: list[str] = field(default_factory=list)
    before_window: int = 0


class BadRecord(ValueError):
    """A line that is not a valid ``requests.jsonl`` record; the message says why."""


def _number(obj: dict[str, Any], key: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise BadRecord(f"{key} is {value!r}, expected a non-negative number or null")
    return float(value)


def _count(obj: dict[str, Any], key: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRecord(f"{key} is {value!r}, expected a non-negative integer or null")
    return value


def _string(obj: dict[str, Any], key: str, required: bool) -> str | None:
    value = obj.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise BadRecord(f"{key} is {value!r}, expected a string")
    return value


def parse_record(raw: bytes) -> RequestRecord:
    """One line of ``requests.jsonl`` as a record.

    Raises:
        BadRecord: not JSON, not an object, a missing or mistyped field, or an unparsable ``ts``.
    """
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise BadRecord(f"not JSON ({exc.__class__.__name__})") from None
    if not isinstance(obj, dict):
        raise BadRecord(f"a JSON {type(obj).__name__}, expected an object")
    ts = _string(obj, "ts", required=True)
    assert ts is not None
    try:
        end_s = iso_to_epoch_s(ts)
    except ValueError:
        raise BadRecord(f"ts {ts[:40]!r} is not an ISO 8601 time") from None
    status = obj.get("status")
    if status not in ("ok", "error"):
        raise BadRecord(f"status is {status!r}, expected 'ok' or 'error'")
    return RequestRecord(
        end_s=end_s,
        ts=ts,
        source=_string(obj, "source", required=False) or "unknown",
        request_id=_string(obj, "request_id", required=False) or "",
        model=_string(obj, "model", required=False),
        prompt_tokens=_count(obj, "prompt_tokens"),
        completion_tokens=_count(obj, "completion_tokens"),
        ttft_ms=_number(obj, "ttft_ms"),
        total_ms=_number(obj, "total_ms"),
        status=status,
        error=_string(obj, "error", required=False),
    )


def iter_records(
    files: Iterable[StrPath], counts: RequestsRead, since_s: float | None = None, block_bytes: int = BLOCK_BYTES
) -> Iterator[RequestRecord]:
    """Valid records of ``files`` (oldest first) that ended at or after ``since_s`` (epoch seconds; None: all).

    Bad lines are counted in ``counts`` (with ``file:line: reason`` examples); blank lines are ignored.
    """
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
                    record = parse_record(raw)
                except BadRecord as exc:
                    counts.bad_lines += 1
                    if len(counts.bad_examples) < MAX_BAD_EXAMPLES:
                        counts.bad_examples.append(f"{os.path.basename(path)}:{line_number}: {exc} — {text(raw, 80)}")
                    continue
                if since_s is not None and record.end_s < since_s:
                    counts.before_window += 1
                    continue
                counts.records += 1
                yield record


def feed(records: Iterable[RequestRecord], *consumers: Callable[[RequestRecord], None]) -> None:
    """Pass every record to each consumer (aggregators' ``add``)."""
    for record in records:
        for consume in consumers:
            consume(record)
