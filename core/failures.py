"""Failed requests counted by cause (pure): the report's ``errors`` section, computed wherever the rows are."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from core.records import RequestRecord
from core.report_schema import ErrorSummary

MAX_ERROR_EXAMPLES = 5
MAX_EXAMPLE_CHARS = 300


def error_summary(records: Iterable[RequestRecord]) -> ErrorSummary:
    """Failed measured requests counted by cause (``incomplete`` rows apart: they are not errors), with up to
    :data:`MAX_ERROR_EXAMPLES` distinct messages per cause."""
    summary = ErrorSummary()
    examples: dict[str, list[str]] = defaultdict(list)
    for record in records:
        if record.ok or record.phase != "measured" or record.error_kind == "incomplete":
            continue
        kind = record.error_kind or "unknown"
        summary.by_kind[kind] = summary.by_kind.get(kind, 0) + 1
        message = (record.error or "")[:MAX_EXAMPLE_CHARS]
        if message not in examples[kind] and len(examples[kind]) < MAX_ERROR_EXAMPLES:
            examples[kind].append(message)
    summary.examples = dict(examples)
    return summary
