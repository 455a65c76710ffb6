"""Report retention: ``REPORTS_KEEP`` newest reports and ``REPORTS_MAX_AGE_DAYS``; named baselines are never removed.

Run by the sidecar after each report it writes (the sidecar is the only writer of ``reports/``). Age and order are
those of writing (the report's ``timestamp``), so a report rebuilt later from old rows (``--report-from``) counts as
new. Files that do not validate as reports are never touched.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from core.report_schema import Report
from sidecar.reports.store import ReportStore

log = logging.getLogger(__name__)
DAY_S = 86_400.0


@dataclass(frozen=True)
class Retention:
    """How many reports to keep (0: all) and the oldest age kept, days (None: no limit)."""

    keep: int
    max_age_days: float | None = None


def written_at_s(report: Report) -> float:
    """When ``report`` was written, Unix seconds (its ``timestamp``; the run's end when that does not parse)."""
    try:
        return datetime.fromisoformat(report.timestamp).timestamp()
    except ValueError:
        return report.run_ended_at


def expired(reports: list[Report], protected: Collection[str], rule: Retention, now_s: float) -> list[Report]:
    """The reports ``rule`` removes, oldest first: all but the newest ``rule.keep`` and those older than
    ``rule.max_age_days``, never one whose id is in ``protected`` (the named baselines). Pure."""
    ordered = sorted(reports, key=lambda r: (written_at_s(r), r.report_id))
    doomed: dict[str, Report] = {}
    if rule.keep > 0:
        for report in ordered[: max(0, len(ordered) - rule.keep)]:
            doomed[report.report_id] = report
    if rule.max_age_days is not None:
        cutoff = now_s - rule.max_age_days * DAY_S
        for report in ordered:
            if written_at_s(report) < cutoff:
                doomed[report.report_id] = report
    return [r for r in ordered if r.report_id in doomed and r.report_id not in protected]


def prune(store: ReportStore, protected: Collection[str], rule: Retention, now_s: float) -> list[str]:
    """Remove the reports :func:`expired` names (each with its rows, attachments and traces); returns their ids.

    Never raises: a file that cannot be removed is logged and left.
    """
    removed = []
    for report in expired(store.list(), protected, rule, now_s):
        try:
            store.delete(report)
        except (OSError, ValueError) as exc:
            log.warning("retention: could not remove %s: %s", report.report_id, exc)
            continue
        removed.append(report.report_id)
    if removed:
        log.info("retention removed %d report(s): %s", len(removed), ", ".join(removed))
    return removed
