"""Benchmark maths on hand-made records."""

from __future__ import annotations

import pytest

from core.records import RequestRecord
from core.stats import latency_stats, measured_window_s, percent_change, run_metrics


def rec(
    start: float, e2e_ms: float, ttft_ms: float = 10.0, tokens: int = 10, ok: bool = True, **kw: object
) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{start}",
        started_at=start,
        ok=ok,
        e2e_ms=e2e_ms,
        ttft_ms=ttft_ms if ok else None,
        output_tokens=tokens if ok else None,
        prompt_tokens=5,
        **kw,  # type: ignore[arg-type]
    )


def test_percentiles_use_linear_interpolation() -> None:
    """p50/p90/p99 match numpy's linear method on 1..100."""
    stats = latency_stats([float(v) for v in range(1, 101)])
    assert stats.p50_ms == pytest.approx(50.5)
    assert stats.p90_ms == pytest.approx(90.1)
    assert stats.p99_ms == pytest.approx(99.01)
    assert stats.mean_ms == pytest.approx(50.5) and stats.max_ms == 100.0 and stats.count == 100


def test_empty_latency_list_gives_none() -> None:
    """No values: every statistic is None, count 0."""
    stats = latency_stats([])
    assert stats.count == 0 and stats.p99_ms is None


def test_throughput_counts_ok_requests_over_measured_window() -> None:
    """req/s and output tok/s divide successes by first send -> last end."""
    records = [rec(100.0, 1000.0), rec(100.5, 1500.0), rec(101.0, 1000.0, ok=False, error_kind="timeout")]
    metrics = run_metrics(records)
    assert measured_window_s(records) == pytest.approx(2.0)
    assert metrics.throughput_req_per_sec == pytest.approx(1.0)
    assert metrics.output_tokens_per_sec == pytest.approx(10.0)
    assert metrics.error_rate_percent == pytest.approx(100 / 3)
    assert metrics.errors_by_kind == {"timeout": 1}


def test_warmup_rows_are_excluded() -> None:
    """Warmup requests change no statistic."""
    measured = [rec(10.0, 100.0), rec(10.1, 200.0)]
    warm = [rec(0.0, 9999.0, phase="warmup")]
    assert run_metrics(measured + warm) == run_metrics(measured)


def test_no_measured_rows_is_an_error() -> None:
    """A run without measured requests cannot be summarised."""
    with pytest.raises(ValueError, match="no measured"):
        run_metrics([rec(0.0, 1.0, phase="warmup")])


def test_latency_stats_only_from_successes() -> None:
    """Failed requests do not pollute latency percentiles."""
    records = [rec(0.0, 100.0), rec(0.0, 5.0, ok=False, error_kind="connection")]
    assert run_metrics(records).e2e.p99_ms == pytest.approx(100.0)


def test_percent_change() -> None:
    """Percent change is relative to the old value and None when undefined."""
    assert percent_change(112.0, 100.0) == pytest.approx(12.0)
    assert percent_change(1.0, 0.0) is None and percent_change(None, 1.0) is None
