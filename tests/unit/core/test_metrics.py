"""Benchmark maths on hand-made records."""

from __future__ import annotations

import pytest

from core.records import RequestRecord, latency_stats
from core.stats import key_insight, measured_window_s, run_metrics


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


def cut(start: float, in_flight_ms: float, ttft_ms: float | None = None, chunks: int = 0) -> RequestRecord:
    """A measured row the run's end cut after ``in_flight_ms``, with what it had received."""
    return RequestRecord(request_id=f"c{start}", started_at=start, ok=False, e2e_ms=in_flight_ms, ttft_ms=ttft_ms,
                         content_chunks=chunks, output_chars=2 * chunks, error_kind="incomplete",
                         error="cancelled by the end of the run (GreenletExit)")  # fmt: skip


def test_a_run_whose_every_request_was_cut_has_figures_of_what_it_received() -> None:
    """32 users, every request cut by the run's end: the counts, the window to the cut and what the cut requests
    received; the error rate, latencies and goodput are None (no request ended), not 0 % errors."""
    rows = [cut(100.0 + i, 60_000.0 - 1000 * i, ttft_ms=40_000.0 + 100 * i if i < 20 else None,
                chunks=3 if i < 20 else 0) for i in range(32)]  # fmt: skip
    m = run_metrics([*rows, rec(90.0, 500.0, phase="warmup")], slo={"ttft_ms": 500.0})
    assert (m.requests_total, m.requests_ok, m.requests_failed, m.requests_incomplete) == (0, 0, 0, 32)
    assert m.duration_s == pytest.approx(60.0) and m.peak_concurrency == 32
    assert m.error_rate_percent is None and m.goodput_percent is None and m.goodput_req_per_sec is None
    assert m.e2e.p50_ms is None and m.ttft.count == 0 and m.throughput_req_per_sec == 0.0
    assert m.cut is not None and (m.cut.requests, m.cut.with_first_token, m.cut.content_chunks) == (32, 20, 60)
    assert m.cut.ttft.count == 20 and m.cut.ttft.p50_ms == pytest.approx(40_950.0)
    assert m.cut.in_flight.max_ms == 60_000.0 and m.cut.by_cause == {"the end of the run": 32}
    assert key_insight(m).startswith("No measured request ended: all 32 sent were cut after up to 60 s in flight")


def test_a_run_with_only_warmup_rows_has_empty_figures() -> None:
    """No measured request sent (its warmup failed): every count 0, no cut block, the insight says so."""
    m = run_metrics([rec(0.0, 1.0, phase="warmup")])
    assert (m.requests_total, m.requests_incomplete, m.error_rate_percent, m.cut) == (0, 0, None, None)
    assert key_insight(m) == "No measured request was sent: nothing was measured"


def test_cut_requests_are_summed_apart_when_others_ended() -> None:
    """1 of 3 cut: the ended ones make the figures, the cut one its own block."""
    m = run_metrics([rec(100.0, 1000.0), rec(100.5, 1500.0), cut(100.2, 2000.0, ttft_ms=300.0, chunks=2)])
    assert m.requests_total == 2 and m.error_rate_percent == 0.0 and m.cut is not None and m.cut.requests == 1


def test_latency_stats_only_from_successes() -> None:
    """Failed requests do not pollute latency percentiles."""
    records = [rec(0.0, 100.0), rec(0.0, 5.0, ok=False, error_kind="connection")]
    assert run_metrics(records).e2e.p99_ms == pytest.approx(100.0)
