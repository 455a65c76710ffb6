"""Requested vs achieved load of an open-loop run (pure; inference-perf's ``achieved_rate``, its issue #633).

scheduled rate = (n - 1) / (last - first scheduled send); achieved rate = the same over actual sends; send delay =
actual - scheduled, ms (early: 0); behind = 100 x (1 - achieved / scheduled) %. A run fell behind when behind >
:data:`BEHIND_LIMIT_PCT` or the delay's p99 > :data:`SEND_DELAY_LIMIT_MS`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from core.records import LatencyStats, RequestRecord, latency_stats, shown

BEHIND_LIMIT_PCT = 5.0  # the achieved rate may fall this far below the scheduled one, %
SEND_DELAY_LIMIT_MS = 100.0  # p99 of the send delay allowed, ms


class ScheduleStats(BaseModel):
    """An open-loop run's requested and achieved load (``metrics.schedule``; None in closed loop)."""

    requests: int = Field(description="Measured requests with a scheduled send time.")
    requested_rate_req_per_sec: float | None = Field(
        default=None, description="RATE as configured (a ramp: the mean of RATE and RATE_END)."
    )
    scheduled_rate_req_per_sec: float | None = Field(
        default=None, description="The schedule's own rate over the measured requests: (n-1) / scheduled span."
    )
    achieved_rate_req_per_sec: float | None = Field(
        default=None, description="The rate the requests were actually sent at: (n-1) / actual span."
    )
    send_delay: LatencyStats = Field(description="Actual minus scheduled send time, ms.")
    behind_pct: float | None = Field(default=None, description="100 × (1 − achieved / scheduled rate), %.")
    behind_limit_pct: float = BEHIND_LIMIT_PCT
    send_delay_limit_ms: float = SEND_DELAY_LIMIT_MS
    fell_behind: bool = False
    reason: str | None = Field(default=None, description="Why the run fell behind its schedule; None when it kept it.")


def requested_rate(rate_req_per_sec: float | None, rate_end_req_per_sec: float | None) -> float | None:
    """RATE, or the mean of RATE and RATE_END for a ramp; None in closed loop."""
    if rate_req_per_sec is None:
        return None
    return rate_req_per_sec if rate_end_req_per_sec is None else (rate_req_per_sec + rate_end_req_per_sec) / 2.0


def _rate(times: Sequence[float]) -> float | None:
    span = max(times) - min(times) if len(times) > 1 else 0.0
    return (len(times) - 1) / span if span > 0 else None


def schedule_stats(
    records: Sequence[RequestRecord], requested_rate_req_per_sec: float | None = None
) -> ScheduleStats | None:
    """Requested vs achieved load of the measured rows (warmup left out) with a scheduled time; None when none has
    one. ``requested_rate_req_per_sec``: RATE (or the mean ramp rate)."""
    rows = [r for r in records if r.phase == "measured" and r.scheduled_at is not None]
    if not rows:
        return None
    scheduled = _rate([r.scheduled_at for r in rows if r.scheduled_at is not None])
    achieved = _rate([r.started_at for r in rows])
    delay = latency_stats([r.queue_delay_ms for r in rows])
    behind = 100.0 * (1.0 - achieved / scheduled) if scheduled and achieved else None
    reasons = []
    if behind is not None and behind > BEHIND_LIMIT_PCT:
        reasons.append(
            f"sent at {achieved:.2f} req/s against a schedule of {scheduled:.2f} req/s ({behind:.1f}% behind, "
            f"limit {BEHIND_LIMIT_PCT:g}%)"
        )
    if delay.p99_ms is not None and delay.p99_ms > SEND_DELAY_LIMIT_MS:
        reasons.append(f"send delay p99 {delay.p99_ms:.0f} ms (limit {SEND_DELAY_LIMIT_MS:g} ms)")
    return ScheduleStats(
        requests=len(rows),
        requested_rate_req_per_sec=requested_rate_req_per_sec,
        scheduled_rate_req_per_sec=scheduled,
        achieved_rate_req_per_sec=achieved,
        send_delay=delay,
        behind_pct=behind,
        fell_behind=bool(reasons),
        reason="; ".join(reasons) or None,
    )


def schedule_text(s: ScheduleStats) -> str:
    """``requested 4 req/s, scheduled 3.92, achieved 3.90 req/s (0.5% behind); send delay p50 1 / ...``."""
    rates = []
    if s.requested_rate_req_per_sec is not None:
        rates.append(f"requested {s.requested_rate_req_per_sec:g} req/s")
    if s.scheduled_rate_req_per_sec is not None:
        rates.append(f"scheduled {s.scheduled_rate_req_per_sec:.2f}")
    achieved = "n/a" if s.achieved_rate_req_per_sec is None else f"{s.achieved_rate_req_per_sec:.2f}"
    behind = "" if s.behind_pct is None else f" ({s.behind_pct:.1f}% behind)"
    rates.append(f"achieved {achieved} req/s{behind}")
    d = s.send_delay
    return (
        f"{', '.join(rates)}; send delay p50 {shown(d.p50_ms)} / p90 {shown(d.p90_ms)} / p99 {shown(d.p99_ms)} / "
        f"max {shown(d.max_ms)} ms"
    )
