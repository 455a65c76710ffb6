"""Failed requests by cause, in numbers (the report's ``errors``) and in words (the terminal): one counting, one
wording, for the measured run and for the warmup."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from core.records import Phase, RequestRecord
from core.report_schema import ErrorSummary

MAX_ERROR_EXAMPLES = 5
MAX_MESSAGE_CHARS = 300


def error_summary(records: Iterable[RequestRecord], phase: Phase = "measured") -> ErrorSummary:
    """Failed requests of ``phase`` by cause, with up to five distinct messages each (``incomplete`` rows left out)."""
    summary = ErrorSummary()
    examples: dict[str, list[str]] = defaultdict(list)
    for record in records:
        if record.ok or record.phase != phase or record.error_kind == "incomplete":
            continue
        kind = record.error_kind or "unknown"
        summary.by_kind[kind] = summary.by_kind.get(kind, 0) + 1
        message = (record.error or "")[:MAX_MESSAGE_CHARS]
        if message not in examples[kind] and len(examples[kind]) < MAX_ERROR_EXAMPLES:
            examples[kind].append(message)
    summary.examples = dict(examples)
    return summary


def causes_text(summary: ErrorSummary, messages_per_cause: int = 2) -> str:
    """``http_status 2 (max_tokens=99999 cannot be ...)``, most frequent first; empty when none failed."""
    parts = []
    for kind, count in sorted(summary.by_kind.items(), key=lambda item: (-item[1], item[0])):
        shown = [m for m in summary.examples.get(kind, []) if m][:messages_per_cause]
        parts.append(f"{kind} {count}" + (f" ({' | '.join(shown)})" if shown else ""))
    return "; ".join(parts)
