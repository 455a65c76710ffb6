"""The figures of ``make calibrate`` from its runs (pure): per-core rates, a run's summary from its rows and CPU
samples, the latency the client adds, the printed table and scaling lines, the stored form of a run."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core.clientview import CalibrationRun
from core.records import RequestRecord
from loadgen.childprocs import CpuSample, cpu_in_window


def per_core_rate(count: float, cpu_s: float) -> float:
    """Events per CPU-second, i.e. events/s one fully used core sustains.

    Raises:
        ValueError: ``cpu_s`` is not positive (nothing was measured).
    """
    if cpu_s <= 0:
        raise ValueError(f"no CPU time measured ({cpu_s} s); the run was too short or the process not sampled")
    return count / cpu_s


@dataclass(frozen=True)
class ClientRun:
    """One client run: what it streamed in its measured window and the CPU it (and the server) used there."""

    requests_ok: int
    requests_failed: int
    chunks: int
    window_s: float
    client_cpu_s: float
    server_cpu_s: float | None = None

    def _per_window(self, value: float) -> float:
        return value / self.window_s if self.window_s > 0 else 0.0

    @property
    def chunks_per_sec(self) -> float:
        """Content chunks per wall-clock second."""
        return self._per_window(self.chunks)

    @property
    def requests_per_sec(self) -> float:
        """Completed requests per wall-clock second."""
        return self._per_window(self.requests_ok)

    @property
    def client_cores(self) -> float:
        """Mean cores the client used over the window."""
        return self._per_window(self.client_cpu_s)

    @property
    def server_cores(self) -> float | None:
        """Mean cores the (mock) server used over the window, when it was sampled."""
        return None if self.server_cpu_s is None or self.window_s <= 0 else self._per_window(self.server_cpu_s)

    @property
    def chunks_per_sec_per_core(self) -> float:
        """Content chunks per client CPU-second."""
        return per_core_rate(self.chunks, self.client_cpu_s)

    @property
    def requests_per_sec_per_core(self) -> float:
        """Completed requests per client CPU-second."""
        return per_core_rate(self.requests_ok, self.client_cpu_s)


def summarize_records(records: Sequence[RequestRecord], client_samples: Sequence[CpuSample],
                      server_samples: Sequence[CpuSample] | None = None) -> ClientRun:
    """A :class:`ClientRun` from our rows: window = first send to last end of the measured rows (pure).

    Raises:
        ValueError: no successful measured row, or no CPU samples.
    """
    measured = [r for r in records if r.phase == "measured"]
    ok = [r for r in measured if r.ok]
    if not ok:
        raise ValueError("no successful request was recorded")
    start = min(r.started_at for r in measured)
    end = max(r.ended_at for r in measured)
    return ClientRun(requests_ok=len(ok), requests_failed=len(measured) - len(ok),
                     chunks=sum(r.content_chunks for r in ok), window_s=end - start,
                     client_cpu_s=cpu_in_window(client_samples, start, end),
                     server_cpu_s=cpu_in_window(server_samples, start, end) if server_samples else None)


def added_latency_ms(records: Sequence[RequestRecord], ttft_ms: float, itl_ms: float) -> tuple[float, float]:
    """``(added TTFT, added ITL)``: medians of the successful rows' TTFT and inter-chunk gaps minus the configured ones.

    Raises:
        ValueError: no successful row with a TTFT, or no inter-chunk gap (responses of a single chunk).
    """
    ok = [r for r in records if r.ok and r.phase == "measured"]
    ttfts = [r.ttft_ms for r in ok if r.ttft_ms is not None]
    gaps = [gap for r in ok for gap in r.itl_ms]
    if not ttfts or not gaps:
        raise ValueError("the latency run recorded no TTFT or no inter-chunk gap")
    return statistics.median(ttfts) - ttft_ms, statistics.median(gaps) - itl_ms


def calibration_table(rows: Mapping[str, ClientRun]) -> list[str]:
    """Aligned text lines describing each run (pure)."""
    lines = [f"{'run':<20}{'ok':>7}{'failed':>7}{'chunks':>9}{'window_s':>10}{'cpu_s':>8}{'client_cores':>13}"
             f"{'mock_cores':>11}{'chunks/s':>10}{'req/s':>8}{'chunks/s/core':>14}{'req/s/core':>11}"]
    for name, run in rows.items():
        mock = "n/a" if run.server_cores is None else f"{run.server_cores:.2f}"
        lines.append(f"{name:<20}{run.requests_ok:>7}{run.requests_failed:>7}{run.chunks:>9}{run.window_s:>10.1f}"
                     f"{run.client_cpu_s:>8.1f}{run.client_cores:>13.2f}{mock:>11}{run.chunks_per_sec:>10.0f}"
                     f"{run.requests_per_sec:>8.0f}{run.chunks_per_sec_per_core:>14.0f}"
                     f"{run.requests_per_sec_per_core:>11.1f}")
    return lines


def calibration_run(name: str, workers: int, run: ClientRun) -> CalibrationRun:
    """One run as stored in ``logs/calibration.json`` (pure)."""
    return CalibrationRun(name=name, workers=workers, chunks_per_sec=run.chunks_per_sec,
                          requests_per_sec=run.requests_per_sec, client_cores=run.client_cores,
                          mock_cores=run.server_cores, chunks_per_sec_per_core=run.chunks_per_sec_per_core,
                          requests_per_sec_per_core=run.requests_per_sec_per_core)


def scaling_lines(runs: Mapping[str, ClientRun], workers: int) -> list[str]:
    """``N workers: X× the chunks/s of 1`` for each ceiling (pure); nothing when N is 1."""
    if workers <= 1:
        return []
    lines = []
    for kind, rate in (("chunk_ceiling", "chunks_per_sec"), ("request_ceiling", "requests_per_sec")):
        one, many = runs.get(f"{kind}_w1"), runs.get(f"{kind}_w{workers}")
        if one and many and getattr(one, rate) > 0:
            ratio = getattr(many, rate) / getattr(one, rate)
            lines.append(f"{kind}: {workers} workers stream {ratio:.2f}x the {rate.replace('_per_sec', '')}/s of 1 "
                         f"(client cores {one.client_cores:.2f} -> {many.client_cores:.2f}, mock cores "
                         f"{one.server_cores or 0:.2f} -> {many.server_cores or 0:.2f})")
    return lines
