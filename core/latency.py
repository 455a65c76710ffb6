"""Latency distributions (pure): mean, percentiles and max of a list of milliseconds (``numpy.percentile``, linear
interpolation). Used by :mod:`core.stats` and :mod:`core.schedule`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel

from core.records import RequestRecord


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


def shown(value: float | None, digits: int = 0, unit: str = "") -> str:
    """``value`` with ``digits`` decimals and ``unit`` (e.g. ``" ms"``) for a text line; ``n/a`` for None."""
    return "n/a" if value is None else f"{value:.{digits}f}{unit}"


def mean_or_none(values: Sequence[float]) -> float | None:
    """The arithmetic mean of ``values``; None when empty."""
    return sum(values) / len(values) if values else None


def effective_ttft_ms(r: RequestRecord) -> float | None:
    """TTFT counted from the scheduled send time (equals TTFT in closed loop)."""
    return None if r.ttft_ms is None else r.ttft_ms + r.queue_delay_ms


def effective_e2e_ms(r: RequestRecord) -> float | None:
    """E2E latency counted from the scheduled send time (equals E2E in closed loop)."""
    return None if r.e2e_ms is None else r.e2e_ms + r.queue_delay_ms
