"""Pure parts of ``make calibrate``: CPU-window interpolation, per-core rates, added latency, run summaries."""

from __future__ import annotations

import pytest

from core.records import RequestRecord
from loadgen.childprocs import CpuSample, cpu_in_window
from loadgen.selftest.calibrate import (
    ClientRun,
    added_latency_ms,
    calibration_run,
    calibration_table,
    per_core_rate,
    scaling_lines,
    summarize_records,
)

# A process using half a core from t=100 s (wall) / t=10 s (monotonic) on, sampled every second.
SAMPLES = [CpuSample(wall_s=100.0 + i, monotonic_s=10.0 + i, cpu_s=2.0 + 0.5 * i) for i in range(11)]


def row(i: int, *, ok: bool = True, chunks: int = 10, ttft_ms: float = 210.0, phase: str = "measured") -> RequestRecord:
    return RequestRecord(
        request_id=str(i),
        phase=phase,  # type: ignore[arg-type]
        started_at=101.0 + i,
        ok=ok,
        e2e_ms=1000.0,
        ttft_ms=ttft_ms if ok else None,
        itl_ms=[21.0, 22.0, 23.0] if ok else [],
        content_chunks=chunks if ok else 0,
    )


def test_cpu_in_window_interpolates_between_samples() -> None:
    """CPU seconds between two samples are linearly interpolated (2.0 at the first sample, 3.25 at 102.5 s)."""
    assert cpu_in_window(SAMPLES, 100.0, 102.5) == pytest.approx(3.25 - 2.0)


def test_cpu_in_window_clamps_outside_the_samples() -> None:
    """Before the first and after the last sample, the nearest sample's value is used (2.0 and 7.0)."""
    assert cpu_in_window(SAMPLES, 50.0, 100.0) == 0.0 and cpu_in_window(SAMPLES, 50.0, 500.0) == pytest.approx(7.0 - 2.0)


def test_cpu_in_window_uses_the_monotonic_clock_on_request() -> None:
    """The same window on the monotonic clock gives the same CPU seconds as on the wall clock."""
    wall = cpu_in_window(SAMPLES, 101.0, 105.0)
    mono = cpu_in_window(SAMPLES, 11.0, 15.0, monotonic=True)
    assert wall == pytest.approx(2.0) and mono == pytest.approx(wall)


def test_cpu_in_window_without_samples_is_an_error() -> None:
    """No samples: ValueError rather than a made-up figure."""
    with pytest.raises(ValueError):
        cpu_in_window([], 1.0, 2.0)


def test_per_core_rate_divides_by_cpu_seconds() -> None:
    """Events per CPU-second."""
    assert per_core_rate(30_000, 1.5) == pytest.approx(20_000.0)


def test_per_core_rate_needs_cpu_time() -> None:
    """Zero CPU seconds cannot give a rate."""
    with pytest.raises(ValueError, match="no CPU time"):
        per_core_rate(10, 0.0)


def test_client_run_rates() -> None:
    """Wall-clock rates, cores used and per-core rates of a run."""
    run = ClientRun(
        requests_ok=100, requests_failed=0, chunks=20_000, window_s=10.0, client_cpu_s=5.0, server_cpu_s=4.0
    )
    assert run.chunks_per_sec == 2000.0 and run.requests_per_sec == 10.0
    assert run.client_cores == 0.5 and run.server_cores == 0.4
    assert run.chunks_per_sec_per_core == 4000.0 and run.requests_per_sec_per_core == 20.0


def test_summarize_records_counts_only_successful_measured_rows() -> None:
    """Chunks and requests come from ok measured rows; the window spans every measured row."""
    rows = [row(0), row(1), row(2, ok=False), row(3, phase="warmup", chunks=999)]
    run = summarize_records(rows, SAMPLES, SAMPLES)
    assert (run.requests_ok, run.requests_failed, run.chunks) == (2, 1, 20)
    assert run.window_s == pytest.approx(3.0)  # 101 s .. 104 s (row 2 ends at 103 + 1)
    assert run.client_cpu_s == pytest.approx(1.5) and run.server_cpu_s == pytest.approx(1.5)


def test_summarize_records_without_success_is_an_error() -> None:
    """A run where nothing succeeded has no ceiling."""
    with pytest.raises(ValueError, match="no successful"):
        summarize_records([row(0, ok=False)], SAMPLES)


def test_added_latency_is_median_minus_configured() -> None:
    """Added TTFT and ITL are the medians of the measured values minus the mock's configured delays."""
    rows = [row(0, ttft_ms=205.0), row(1, ttft_ms=210.0), row(2, ttft_ms=250.0)]
    ttft, itl = added_latency_ms(rows, ttft_ms=200.0, itl_ms=20.0)
    assert ttft == pytest.approx(10.0) and itl == pytest.approx(2.0)


def test_added_latency_needs_inter_chunk_gaps() -> None:
    """Single-chunk answers have no ITL: an error, not a zero."""
    single = RequestRecord(request_id="x", started_at=0.0, ok=True, e2e_ms=5.0, ttft_ms=4.0, content_chunks=1)
    with pytest.raises(ValueError):
        added_latency_ms([single], ttft_ms=0.0, itl_ms=0.0)


def test_calibration_table_has_a_row_per_run() -> None:
    """Header plus one line per run, named."""
    run = ClientRun(requests_ok=10, requests_failed=0, chunks=100, window_s=1.0, client_cpu_s=0.5)
    lines = calibration_table({"chunk_ceiling": run, "request_ceiling": run})
    assert len(lines) == 3 and lines[1].startswith("chunk_ceiling") and "n/a" in lines[2]


def test_scaling_lines_compare_n_workers_with_one() -> None:
    """The scale-out line gives N workers' chunks/s and req/s as a multiple of one worker's, with the cores used."""
    one = ClientRun(requests_ok=100, requests_failed=0, chunks=10_000, window_s=10.0, client_cpu_s=9.0, server_cpu_s=0.5)
    two = ClientRun(requests_ok=180, requests_failed=0, chunks=18_000, window_s=10.0, client_cpu_s=18.0, server_cpu_s=1.0)
    lines = scaling_lines({"chunk_ceiling_w1": one, "chunk_ceiling_w2": two, "request_ceiling_w1": one,
                           "request_ceiling_w2": two}, workers=2)
    assert lines[0].startswith("chunk_ceiling: 2 workers stream 1.80x the chunks/s of 1 (client cores 0.90 -> 1.80")
    assert lines[1].startswith("request_ceiling: 2 workers stream 1.80x the requests/s of 1")
    assert scaling_lines({}, workers=1) == []


def test_calibration_run_keeps_the_per_core_figures() -> None:
    """A stored run carries its workers, rates, cores and per-core rates."""
    run = ClientRun(requests_ok=100, requests_failed=0, chunks=20_000, window_s=10.0, client_cpu_s=5.0, server_cpu_s=1.0)
    stored = calibration_run("chunk_ceiling_w2", 2, run)
    assert (stored.workers, stored.chunks_per_sec, stored.client_cores, stored.mock_cores) == (2, 2000.0, 0.5, 0.1)
    assert stored.chunks_per_sec_per_core == 4000.0 and stored.requests_per_sec_per_core == 20.0
