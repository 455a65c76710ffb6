"""LLM-specific metric definitions: TPOT, ITL, goodput, queue delay, peak concurrency, windows, key insight."""

from __future__ import annotations

from typing import Any

import pytest

from core.parsing import parse_slo
from core.records import RequestRecord
from core.stats import key_insight, peak_concurrency, run_metrics


def rec(start: float, e2e_ms: float, ttft_ms: float, tokens: int, **kw: Any) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{start}",
        started_at=start,
        ok=True,
        e2e_ms=e2e_ms,
        ttft_ms=ttft_ms,
        output_tokens=tokens,
        content_chunks=tokens,
        **kw,
    )


def test_tpot_is_decode_time_per_token_after_the_first() -> None:
    """TPOT = (E2E − TTFT) / (tokens − 1)."""
    assert rec(0, 1100.0, 100.0, 11).tpot_ms == pytest.approx(100.0)
    assert rec(0, 100.0, 100.0, 1).tpot_ms is None


def test_itl_pools_every_gap() -> None:
    """ITL statistics pool the gaps of all requests."""
    rows = [rec(0, 300, 100, 3, itl_ms=[100.0, 100.0]), rec(0, 600, 100, 3, itl_ms=[200.0, 300.0])]
    itl = run_metrics(rows).itl
    assert itl.count == 4 and itl.max_ms == 300.0 and itl.p50_ms == pytest.approx(150.0)


def test_goodput_counts_requests_meeting_every_slo() -> None:
    """Goodput counts successes within all SLO bounds, per second and as a share."""
    rows = [rec(0, 1000, 100, 10), rec(0, 1000, 900, 10), rec(1.0, 3000, 100, 10)]
    m = run_metrics(rows, parse_slo("ttft_ms<=500,e2e_ms<=2000"))
    assert m.goodput_percent == pytest.approx(100 / 3)
    assert m.goodput_req_per_sec == pytest.approx(1 / 4.0)


@pytest.mark.parametrize("bad", ["ttft<=500", "ttft_ms<500", "e2e_ms<=fast", "ttft_ms<=500;e2e_ms<=1"])
def test_bad_slo_text_is_rejected_with_an_example(bad: str) -> None:
    """An SLO that does not parse says what the right form is."""
    with pytest.raises(ValueError, match="ttft_ms<=500"):
        parse_slo(bad)


def test_open_loop_latency_counts_from_scheduled_time() -> None:
    """A request sent 2 s late has 2 s added to TTFT and E2E (no coordinated omission)."""
    late = rec(12.0, 1000.0, 100.0, 10, scheduled_at=10.0)
    m = run_metrics([late])
    assert m.ttft.p50_ms == pytest.approx(2100.0) and m.e2e.p50_ms == pytest.approx(3000.0)
    assert m.queue_delay.max_ms == pytest.approx(2000.0)


def test_peak_concurrency_counts_overlaps() -> None:
    """Peak concurrency is the most requests in flight at once."""
    rows = [rec(0.0, 1000, 10, 2), rec(0.5, 1000, 10, 2), rec(0.9, 1000, 10, 2), rec(2.0, 100, 10, 2)]
    assert peak_concurrency(rows) == 3


def test_windows_and_stable_insight() -> None:
    """Evenly spread completions give stable windows and a 'stable' key insight."""
    rows = [rec(i * 0.1, 100.0, 10.0, 5) for i in range(200)]
    m = run_metrics(rows)
    assert len(m.windows) == 10 and sum(w.completed for w in m.windows) == 200
    assert m.throughput_variation_percent is not None and m.throughput_variation_percent < 10
    assert key_insight(m).startswith("Throughput stable at") and "no error" in key_insight(m)


def test_insight_names_the_dominant_failure() -> None:
    """Failures show up in the key insight with their main cause."""
    rows = [rec(i * 0.1, 100.0, 10.0, 5) for i in range(50)]
    rows += [
        RequestRecord(request_id=f"f{i}", started_at=1.0, ok=False, e2e_ms=5.0, error_kind="timeout") for i in range(5)
    ]
    assert "mostly timeout" in key_insight(run_metrics(rows))


def test_a_mostly_failed_run_is_never_called_stable() -> None:
    """A run whose requests mostly failed (a benchmark across a switch: thousands of 404s, a few answers) leads with
    the failures, even though its few successes came evenly."""
    rows = [rec(i * 0.1, 100.0, 10.0, 5) for i in range(200)]
    rows += [RequestRecord(request_id=f"f{i}", started_at=i * 0.01, ok=False, e2e_ms=1.0, error_kind="http_status")
             for i in range(2000)]  # fmt: skip
    insight = key_insight(run_metrics(rows))
    assert insight.startswith("Most requests failed") and "stable" not in insight and "mostly http_status" in insight


def test_output_lengths_and_chunk_mismatch() -> None:
    """Requested vs actual lengths are reported and usage/chunk mismatches counted."""
    rows = [
        rec(0, 100, 10, 10, max_tokens=16),
        rec(0, 100, 10, 10, max_tokens=16).model_copy(update={"content_chunks": 9}),
    ]
    lengths = run_metrics(rows).output_lengths
    assert lengths.requested_mean == 16 and lengths.actual_mean == 10 and lengths.chunk_count_mismatch == 1


def test_window_tokens_are_placed_where_they_were_decoded() -> None:
    """A long request's tokens count in the windows it was decoding in, not all in the window it ended in."""
    rows = [rec(0.0, 10_000.0, 0.0, 101)] + [rec(0.0, 10.0, 1.0, 1)] * 9  # one 10 s stream plus short ones
    windows = run_metrics(rows).windows
    assert sum(w.output_tokens_per_sec * (w.end_s - w.start_s) for w in windows) == pytest.approx(101 + 9)
    assert all(w.output_tokens_per_sec > 0 for w in windows)
