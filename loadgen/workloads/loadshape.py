"""Arrival schedules of the open loop from the run plan: a constant rate or a linear ramp (pure)."""

from __future__ import annotations

from collections.abc import Iterator

from core.distributions import arrival_gaps_s, ramp_arrival_gaps_s
from core.report_schema import BenchmarkConfig


def plan_arrival_gaps(plan: BenchmarkConfig) -> Iterator[float]:
    """Gaps between arrivals, seconds: gamma gaps at RATE (shape BURSTINESS, seeded by SEED), or a linear ramp from
    RATE to RATE_END over DURATION (else over REQUESTS arrivals).

    Raises:
        ValueError: the plan has no rate, or a rate or burstiness that is not finite and > 0.
    """
    if plan.rate_req_per_sec is None:
        raise ValueError("an open-loop run needs RATE (requests per second)")
    burstiness = plan.burstiness or 1.0
    if plan.rate_end_req_per_sec is None:
        return arrival_gaps_s(plan.rate_req_per_sec, burstiness, plan.seed)
    return ramp_arrival_gaps_s(plan.rate_req_per_sec, plan.rate_end_req_per_sec, burstiness, plan.seed,
                               duration_s=plan.duration_s, requests=plan.requests)
