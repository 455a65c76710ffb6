"""Pure benchmark maths: latency distributions and throughput from request records (no I/O).

Definitions follow vLLM's ``benchmarks/serve.py``: percentiles by linear interpolation (``numpy.percentile``),
request throughput = successful requests / measured duration, output tok/s = sum of ``usage.completion_tokens``
of successful requests / measured duration, where the measured duration runs from the first measured request's
send to the last one's end.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel

from loadtest.records import RequestRecord


class LatencyStats(BaseModel):
    """Distribution of one latency, milliseconds. All None when there are no values."""

    count: int = 0
    mean_ms: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None


def latency_stats(values_ms: Sequence[float]) -> LatencyStats:
    """Mean, p50/p90/p95/p99 (linear interpolation) and max of ``values_ms``."""
    if not values_ms:
        return LatencyStats()
    arr = np.asarray(values_ms, dtype=float)
    p50, p90, p95, p99 = np.percentile(arr, [50, 90, 95, 99])
    return LatencyStats(
        count=int(arr.size),
        mean_ms=float(arr.mean()),
        p50_ms=float(p50),
        p90_ms=float(p90),
        p95_ms=float(p95),
        p99_ms=float(p99),
        max_ms=float(arr.max()),
    )


class RunMetrics(BaseModel):
    """Aggregate figures of the measured phase of one benchmark run."""

    requests_total: int
    requests_ok: int
    requests_failed: int
    errors_by_kind: dict[str, int]
    duration_s: float
    throughput_req_per_sec: float
    output_tokens_total: int
    output_tokens_per_sec: float
    prompt_tokens_total: int
    e2e: LatencyStats
    ttft: LatencyStats
    error_rate_percent: float


def measured_window_s(records: Sequence[RequestRecord]) -> float:
    """Seconds from the first measured request's send to the last one's end (0 when empty)."""
    if not records:
        return 0.0
    start = min(r.started_at for r in records)
    end = max(r.ended_at for r in records)
    return max(end - start, 0.0)


def run_metrics(records: Sequence[RequestRecord]) -> RunMetrics:
    """Aggregate the ``measured`` records (warmup rows are ignored).

    Raises:
        ValueError: no measured records at all (nothing to report).
    """
    measured = [r for r in records if r.phase == "measured"]
    if not measured:
        raise ValueError("no measured requests: the run produced nothing to report")
    ok = [r for r in measured if r.ok]
    duration_s = measured_window_s(measured)
    output_tokens = sum(r.output_tokens or 0 for r in ok)
    kinds = Counter(r.error_kind or "unknown" for r in measured if not r.ok)
    return RunMetrics(
        requests_total=len(measured),
        requests_ok=len(ok),
        requests_failed=len(measured) - len(ok),
        errors_by_kind=dict(sorted(kinds.items())),
        duration_s=duration_s,
        throughput_req_per_sec=len(ok) / duration_s if duration_s > 0 else 0.0,
        output_tokens_total=output_tokens,
        output_tokens_per_sec=output_tokens / duration_s if duration_s > 0 else 0.0,
        prompt_tokens_total=sum(r.prompt_tokens or 0 for r in ok),
        e2e=latency_stats([r.e2e_ms for r in ok if r.e2e_ms is not None]),
        ttft=latency_stats([r.ttft_ms for r in ok if r.ttft_ms is not None]),
        error_rate_percent=100.0 * (len(measured) - len(ok)) / len(measured),
    )


def percent_change(new: float | None, old: float | None) -> float | None:
    """``(new - old) / old * 100``; None when either is missing or ``old`` is 0."""
    if new is None or old is None or old == 0:
        return None
    return (new - old) / old * 100.0
