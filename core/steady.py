"""Steady state of a run (pure): the span where the load held level, and the figures over it.

The window is cut into :data:`SLICES`; the plateau is the 90th percentile of the slices' time-weighted in-flight
means; the window is the longest run of slices within +-:data:`BAND` of it, edges trimmed while their output tok/s
lies outside +-:data:`BAND` of the median. Shorter than :data:`MIN_SLICES` or the median E2E, with no request ending in
it, or fewer than :data:`MIN_REQUESTS` successes: no steady state. Cut requests count as in flight until cut.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, Field

from core.records import LatencyStats, RequestRecord, effective_e2e_ms, effective_ttft_ms, latency_stats

SLICES = 20
BAND = 0.2
MIN_SLICES = 4
MIN_REQUESTS = 10
METHOD = (
    f"longest span of {SLICES} equal slices whose mean in-flight requests stay within ±{BAND:.0%} of the run's "
    f"plateau level (90th percentile) and whose output tok/s stay within ±{BAND:.0%} of the span's median; "
    f"at least {MIN_SLICES} slices"
)


class SteadyState(BaseModel):
    """The steady-state window (seconds since the first measured send) and the figures over it (``metrics.steady``)."""

    method: str = Field(default=METHOD, description="How the window was found (core/steady.py).")
    found: bool
    reason: str | None = Field(default=None, description="Why no steady state was found; None when one was.")
    start_s: float | None = None
    end_s: float | None = None
    duration_s: float | None = None
    in_flight_mean: float | None = Field(default=None, description="Mean requests in flight over the window.")
    requests_completed: int = 0
    throughput_req_per_sec: float | None = None
    output_tokens_per_sec: float | None = None
    ttft: LatencyStats = Field(default_factory=LatencyStats)
    e2e: LatencyStats = Field(default_factory=LatencyStats)


def decode_tokens_in(r: RequestRecord, start: float, lo: float, hi: float) -> float:
    """Output tokens of ``r`` in ``[lo, hi)`` s since ``start``: one at TTFT, the rest even to the end."""
    if not r.ok or not r.output_tokens or r.ttft_ms is None or r.e2e_ms is None:
        return 0.0
    first = r.started_at - start + r.ttft_ms / 1000.0
    end = r.started_at - start + r.e2e_ms / 1000.0
    tokens = 1.0 if lo <= first < hi else 0.0
    rest = r.output_tokens - 1
    if rest > 0:
        if end > first:
            tokens += rest * max(0.0, min(hi, end) - max(lo, first)) / (end - first)
        elif lo <= end < hi:
            tokens += rest
    return tokens


def _in_flight(rows: Sequence[RequestRecord], start: float, lo: float, hi: float) -> float:
    """Mean requests in flight over ``[lo, hi)`` seconds since ``start`` (time-weighted)."""
    busy = sum(max(0.0, min(hi, r.ended_at - start) - max(lo, r.started_at - start)) for r in rows)
    return busy / (hi - lo)


def _longest_run(flags: Sequence[bool]) -> tuple[int, int]:
    """``(first, last + 1)`` of the longest run of True in ``flags`` (the earliest on a tie); (0, 0) if none."""
    best = (0, 0)
    begin = None
    for i, flag in enumerate([*flags, False]):
        if flag and begin is None:
            begin = i
        elif not flag and begin is not None:
            if i - begin > best[1] - best[0]:
                best = (begin, i)
            begin = None
    return best


def steady_state(records: Sequence[RequestRecord]) -> SteadyState:
    """The steady-state window of ``records`` (warmup and incomplete rows left out) and its figures."""
    every = [r for r in records if r.phase == "measured"]  # in flight: those the run's end cut count too
    rows = [r for r in every if r.error_kind != "incomplete"]
    ok = [r for r in rows if r.ok]
    if len(ok) < MIN_REQUESTS:
        return SteadyState(found=False, reason=f"{len(ok)} successful requests (needs {MIN_REQUESTS})")
    start = min(r.started_at for r in rows)
    total_s = max(r.ended_at for r in rows) - start
    if total_s <= 0:
        return SteadyState(found=False, reason="the measured window has no length")
    width = total_s / SLICES
    edges = [(i * width, (i + 1) * width) for i in range(SLICES)]
    in_flight = [_in_flight(every, start, lo, hi) for lo, hi in edges]
    tokens = [sum(decode_tokens_in(r, start, lo, hi) for r in ok) / width for lo, hi in edges]
    level = float(np.percentile(in_flight, 90))
    first, last = _longest_run([abs(v - level) <= BAND * level for v in in_flight])
    while last - first >= MIN_SLICES:
        median = float(np.median(tokens[first:last]))
        if abs(tokens[first] - median) > BAND * median:
            first += 1
        elif abs(tokens[last - 1] - median) > BAND * median:
            last -= 1
        else:
            break
    if last - first < MIN_SLICES:
        return SteadyState(
            found=False,
            reason=f"the load never held level for {MIN_SLICES} of {SLICES} slices (±{BAND:.0%} in flight and tok/s)",
        )
    lo, hi = edges[first][0], edges[last - 1][1]
    duration_s = hi - lo
    e2e_p50_s = float(np.median([r.e2e_ms for r in ok if r.e2e_ms is not None] or [0.0])) / 1000.0
    if e2e_p50_s > duration_s:  # each request outlasts the level span: no flow of requests to take a rate of
        return SteadyState(
            found=False,
            reason=f"requests outlast the level span (E2E p50 {e2e_p50_s:.1f} s > {duration_s:.1f} s): run longer "
            "(DURATION, REQUESTS) or with less load",
        )
    completed = [r for r in ok if lo <= r.ended_at - start <= hi]
    if not completed:  # every user waiting on a stalled server is level too, but nothing flows
        return SteadyState(found=False, reason=f"no request ended in the level span ({lo:.0f}–{hi:.0f} s): the load "
                           "stalled there")  # fmt: skip
    sent = [r for r in ok if lo <= r.started_at - start < hi]
    return SteadyState(
        found=True,
        start_s=lo,
        end_s=hi,
        duration_s=duration_s,
        in_flight_mean=_in_flight(every, start, lo, hi),
        requests_completed=len(completed),
        throughput_req_per_sec=len(completed) / duration_s,
        output_tokens_per_sec=sum(decode_tokens_in(r, start, lo, hi) for r in ok) / duration_s,
        ttft=latency_stats([v for r in sent if (v := effective_ttft_ms(r)) is not None]),
        e2e=latency_stats([v for r in sent if (v := effective_e2e_ms(r)) is not None]),
    )
