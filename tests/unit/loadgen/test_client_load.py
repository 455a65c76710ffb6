"""The client-limited judgement."""

from __future__ import annotations

import pytest

from core.clientview import Calibration, ProcessLoad, client_lag_ms, client_view
from core.records import LatencyStats, RequestRecord
from loadgen.terminal.summary import client_lines

ROWS = [RequestRecord(request_id=str(i), started_at=0.0, ok=True, e2e_ms=10.0, content_chunks=100) for i in range(10)]
CAL = Calibration(
    chunks_per_sec_per_core=1000.0, requests_per_sec_per_core=50.0, added_ttft_ms=1.0, added_itl_ms=0.1, measured_at="t"
)


def test_busy_client_cpu_flags_the_run() -> None:
    """A Locust process near one full core marks the run client-limited."""
    view = client_view(ROWS, duration_s=10.0, cpu_cores=0.95, calibration=None)
    assert view.client_limited and view.cpu_cores_used == pytest.approx(0.95) and "CPU" in (view.reason or "")


def test_chunk_rate_near_calibrated_ceiling_flags_the_run() -> None:
    """Streaming ≥ 80 % of the calibrated chunks/s ceiling marks the run client-limited."""
    view = client_view(ROWS, duration_s=1.2, cpu_cores=0.05, calibration=CAL)
    assert view.client_limited and "calibrated" in (view.reason or "")


def test_light_client_is_not_limited() -> None:
    """Low CPU and chunk rate: not client-limited."""
    view = client_view(ROWS, duration_s=10.0, cpu_cores=0.1, calibration=CAL)
    assert not view.client_limited and view.reason is None and view.chunks_per_sec == 100.0


def load(lag_p50_ms: float, lag_p99_ms: float, cpu_s: float = 1.0, slot: int = 0) -> ProcessLoad:
    lag = LatencyStats(count=1000, mean_ms=lag_p50_ms, p50_ms=lag_p50_ms, p90_ms=lag_p99_ms, p95_ms=lag_p99_ms,
                       p99_ms=lag_p99_ms, max_ms=lag_p99_ms * 2)
    return ProcessLoad(pid=100 + slot, role="worker", slot=slot, requests=10, cpu_s=cpu_s, wall_s=10.0, lag=lag)


TIMED = [RequestRecord(request_id=str(i), started_at=0.0, ok=True, e2e_ms=1000.0, ttft_ms=400.0 + i,
                       itl_ms=[50.0, 51.0, 52.0], content_chunks=4) for i in range(10)]


def test_a_late_client_is_flagged_whatever_its_cpu() -> None:
    """A process that used 0.38 cores but woke 60 ms late at the median is client-limited, and says by how much."""
    view = client_view(TIMED, duration_s=10.0, cpu_cores=0.4, calibration=CAL, processes=[load(60.0, 250.0, 3.8)])
    assert view.client_limited and view.lag_p50_ms == 60.0 and view.lag_p99_ms == 250.0
    assert "event loop ran late (lag p50 60.00 ms, p99 250.00 ms)" in (view.reason or "")
    assert "itl p99 (52.00 ms) by 250.00 ms = 481%" in (view.reason or "")  # 250 / 51.98
    shares = {i.figure: round(i.share_pct) for i in view.lag_impact}
    assert shares == {"ttft_p50_ms": 15, "ttft_p99_ms": 61, "itl_p50_ms": 118, "itl_p99_ms": 481}


def test_a_prompt_client_against_a_slow_server_is_not_flagged() -> None:
    """Lag of 0.1 ms (p50) and 2 ms (p99) against 400 ms TTFT and 50 ms ITL moves nothing by 10 %."""
    view = client_view(TIMED, duration_s=10.0, cpu_cores=0.05, calibration=CAL, processes=[load(0.1, 2.0, 0.3)])
    assert not view.client_limited and view.reason is None
    assert max(i.share_pct for i in view.lag_impact) == pytest.approx(100 * 2.0 / 51.98, rel=1e-3)


def test_the_worst_process_speaks_for_the_run() -> None:
    """With several load processes the verdict uses the latest one's lag and any one's CPU."""
    quiet, late = load(0.1, 2.0, slot=0), load(0.2, 40.0, slot=1)
    view = client_view(TIMED, 10.0, 0.5, None, processes=[quiet, late], workers=2)
    assert view.client_limited and view.lag_p99_ms == 40.0 and view.workers == 2
    busy = client_view(TIMED, 10.0, 1.2, None, processes=[load(0.1, 2.0, 9.5), load(0.1, 2.0, 2.0, 1)], workers=2)
    assert busy.client_limited and "a load process used 0.95 CPU cores" in (busy.reason or "")


def test_the_ceiling_and_the_cpu_limit_scale_with_the_workers() -> None:
    """Two workers may stream up to 80 % of twice the per-core ceiling, and the tree may use 2 x 0.9 cores."""
    rows = [RequestRecord(request_id=str(i), started_at=0.0, ok=True, e2e_ms=10.0, content_chunks=120) for i in range(10)]
    assert client_view(rows, 1.0, 0.5, CAL, workers=1).client_limited  # 1200 chunks/s >= 800
    assert not client_view(rows, 1.0, 1.5, CAL, workers=2).client_limited  # < 1600 and < 1.8 cores
    assert client_view(rows, 1.0, 1.85, CAL, workers=2).client_limited


def test_summary_states_the_client_load_and_why_a_run_is_client_limited() -> None:
    """The terminal summary prints each load process's CPU and the lag, and the share it could have moved."""
    view = client_view(TIMED, duration_s=10.0, cpu_cores=0.4, calibration=None, processes=[load(60.0, 250.0, 3.8)])
    lines = client_lines(view)
    assert lines[0] == ("[CLIENT] 1 load process(es), CPU 0.38 cores; event-loop lag p50 60.00 ms, p99 250.00 ms; "
                        "could move itl p99 by 481% (limit 10%)")
    assert lines[1].startswith("[WARN] Client-limited run: the client's event loop ran late")
    assert client_lines(client_view(TIMED, 10.0, 0.05, None)) == []  # no process reports (a rebuilt run), not limited


def test_a_figure_near_zero_is_moved_by_more_than_a_thousand_percent() -> None:
    """Chunks that arrive in one read have ITLs of ~0 ms: any lag moves them by '>1000%', said with the lag in ms."""
    batched = [r.model_copy(update={"itl_ms": [0.0, 0.0, 0.0]}) for r in TIMED]
    view = client_view(batched, 10.0, 0.2, None, processes=[load(3.0, 20.0)])
    assert view.client_limited and "itl p99 (0.00 ms) by 20.00 ms = >1000%" in (view.reason or "")


def test_client_lag_is_the_worst_process_mean() -> None:
    """The cross-check's lag allowance: the latest process's mean lag; no process with samples, no allowance."""
    late, early = load(40.0, 120.0, slot=0), load(5.0, 20.0, slot=1)
    assert client_lag_ms([early, late]) == 40.0
    idle = early.model_copy(update={"lag": LatencyStats()})
    assert client_lag_ms([idle]) is None and client_lag_ms([]) is None
