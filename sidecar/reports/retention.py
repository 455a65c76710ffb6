"""Report retention: ``REPORTS_KEEP`` newest reports and ``REPORTS_MAX_AGE_DAYS`` (by ``timestamp``); named
baselines and files that are no reports are never removed."""

from __future__ import annotations

import logging
import math
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
    """The reports ``rule`` removes, oldest first, never one whose id is in ``protected``."""
    ordered = sorted(reports, key=lambda r: (written_at_s(r), r.report_id))
    surplus = len(ordered) - rule.keep if rule.keep > 0 else 0
    cutoff = -math.inf if rule.max_age_days is None else now_s - rule.max_age_days * DAY_S
    return [r for i, r in enumerate(ordered)
            if (i < surplus or written_at_s(r) < cutoff) and r.report_id not in protected]  # fmt: skip


def prune(store: ReportStore, protected: Collection[str], rule: Retention, now_s: float) -> list[str]:
    """Remove the reports :func:`expired` names; returns their ids (never raises: failures are logged)."""
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
