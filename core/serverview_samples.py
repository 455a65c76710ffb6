"""vLLM's ``/metrics`` as samples, and what changed between two scrapes: counter deltas, quantiles from bucket
deltas (linear inside a bucket, as Prometheus' ``histogram_quantile``) and exact means (``_sum`` / ``_count``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, Field

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def parse_exposition(text: str) -> Samples:
    """``{sample name: {labels: value}}`` of a Prometheus text exposition (vLLM's ``/metrics``).

    Raises:
        ValueError: the text is not a Prometheus exposition.
    """
    out: Samples = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name][tuple(sorted(sample.labels.items()))] = float(sample.value)
    return dict(out)


def total(samples: Samples, name: str, **match: str) -> float:
    """Sum of ``name`` over the label sets that contain ``match``."""
    return sum(
        value
        for labels, value in samples.get(name, {}).items()
        if all(dict(labels).get(k) == v for k, v in match.items())
    )


def delta(before: Samples, after: Samples, name: str, **match: str) -> float:
    """``name``'s :func:`total` in ``after`` minus that in ``before``."""
    return total(after, name, **match) - total(before, name, **match)


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> tuple[float, float, float] | None:
    """``(value, lower, upper)``: quantile ``q`` (0..1) of cumulative ``(upper bound, count)`` buckets as Prometheus'
    ``histogram_quantile()`` (linear inside the bucket; +Inf gives the previous bound) and the bounds of the bucket
    holding it; None when empty."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower, below = 0.0, 0.0
    for upper, through in ordered:
        if through >= rank:
            if math.isinf(upper) or through == below:
                return lower if math.isinf(upper) else upper, lower, upper
            return lower + (upper - lower) * (rank - below) / (through - below), lower, upper
        lower, below = upper, through
    return lower, lower, math.inf


def _bucket_deltas(before: Samples, after: Samples, name: str) -> list[tuple[float, float]]:
    per_le: dict[float, float] = defaultdict(float)
    for source, sign in ((after, 1.0), (before, -1.0)):
        for labels, value in source.get(f"{name}_bucket", {}).items():
            le = dict(labels).get("le")
            if le is not None:
                per_le[float(le)] += sign * value
    return sorted(per_le.items())


def bucket_counts(before: Samples, after: Samples, name: str) -> list[tuple[float, float]]:
    """Histogram ``name``'s ``(upper bound, count)`` per bucket over the window, ascending."""
    cumulative = _bucket_deltas(before, after, name)
    return [(le, count - (cumulative[i - 1][1] if i else 0.0)) for i, (le, count) in enumerate(cumulative)]


BUCKET_TEXT = "The histogram bucket holding p{q}, ms: [lower, upper] (upper null in the last, +Inf bucket)."


class LatencyView(BaseModel):
    """One server-side latency histogram over the window, milliseconds: the mean is exact, each percentile is
    interpolated inside the histogram bucket that holds it (Prometheus' ``histogram_quantile``) and may lie beyond
    every request's own figure; ``p*_bucket_ms`` are that bucket's bounds, where the true percentile lies."""

    count: int
    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    p50_bucket_ms: tuple[float, float | None] | None = Field(default=None, description=BUCKET_TEXT.format(q=50))
    p90_bucket_ms: tuple[float, float | None] | None = Field(default=None, description=BUCKET_TEXT.format(q=90))
    p99_bucket_ms: tuple[float, float | None] | None = Field(default=None, description=BUCKET_TEXT.format(q=99))


def latency_view(before: Samples, after: Samples, name: str) -> LatencyView:
    """Count, exact mean and bucket-interpolated quantiles of histogram ``name`` (seconds) over the window."""
    count = delta(before, after, f"{name}_count")
    buckets = _bucket_deltas(before, after, name)
    percentiles: dict[str, Any] = {}
    for q in (50, 90, 99):
        found = histogram_quantile(q / 100, buckets)
        percentiles[f"p{q}_ms"] = None if found is None else found[0] * 1000.0
        if found is not None:
            percentiles[f"p{q}_bucket_ms"] = found[1] * 1000.0, None if math.isinf(found[2]) else found[2] * 1000.0
    mean_ms = delta(before, after, f"{name}_sum") / count * 1000.0 if count > 0 else None
    return LatencyView(count=round(count), mean_ms=mean_ms, **percentiles)


def sum_samples(scrapes: Sequence[Samples]) -> Samples:
    """Several servers' scrapes as one: every sample added up per name and label set."""
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(lambda: defaultdict(float))
    for scrape in scrapes:
        for name, values in scrape.items():
            for labels, value in values.items():
                out[name][labels] += value
    return {name: dict(values) for name, values in out.items()}
