"""Resource summaries: per-GPU peaks and means from fake NVML, CPU % of a process tree, a compact time series."""

from __future__ import annotations

import os

import pytest

from core.report_schema import GpuSample
from sidecar.sampling.gpu import NvmlReader
from sidecar.sampling.resources import Sample, summarise, timeline
from sidecar.sampling.sampler import ProcessTreeMeter, Sampler
from tests.fakes import FakeNvml

GIB = 1024**3


def gpu(index: int, used: float, util: float | None = None, power: float | None = None) -> GpuSample:
    return GpuSample(t=0.0, index=index, mem_used_gb=used, mem_total_gb=80.0, util_percent=util, power_w=power)


def test_per_gpu_peaks_and_means() -> None:
    """Each GPU gets its own memory peak and utilisation/power peak and mean."""
    samples = [
        Sample(t=1.0, gpus=[gpu(0, 10.0, 20.0, 100.0), gpu(1, 5.0, 0.0, 50.0)]),
        Sample(t=2.0, gpus=[gpu(0, 12.0, 60.0, 300.0), gpu(1, 6.0, 10.0, 70.0)]),
    ]
    peaks = summarise(samples, start=0.0, gpu_names=["A100", "A100"])
    g0, g1 = peaks.gpus
    assert (g0.name, g0.mem_used_peak_gb, g0.util_percent_peak, g0.util_percent_mean) == ("A100", 12.0, 60.0, 40.0)
    assert (g0.power_w_peak, g0.power_w_mean, g1.power_w_mean) == (300.0, 200.0, 60.0)
    assert peaks.gpu_mem_peak_gb == 18.0 and peaks.gpu_samples == 2


def test_fake_nvml_readings_flow_into_window_stats() -> None:
    """Samples taken through the NVML reader (fake) give utilisation and power statistics for the window."""
    fake = FakeNvml(used_bytes=[4 * GIB])
    sampler = Sampler(NvmlReader(fake), pid_source=lambda: None, interval_s=10, gpu_names=["NVIDIA H200"])
    first = sampler.sample_once()
    fake.used_bytes = [6 * GIB]
    last = sampler.sample_once()
    (stats,) = sampler.peaks(first.t, last.t).gpus
    assert stats.name == "NVIDIA H200" and stats.mem_used_peak_gb == pytest.approx(6.0)
    assert stats.util_percent_mean == 42.0 and stats.power_w_peak == 350.0 and stats.mem_total_gb == 141.0


def test_without_gpu_there_are_no_gpu_stats() -> None:
    """No NVML: no per-GPU entries and no GPU peak, but host memory is still summarised."""
    peaks = summarise([Sample(t=1.0, host_used_gb=3.0)], start=0.0)
    assert peaks.gpus == [] and peaks.gpu_mem_peak_gb is None and peaks.host_mem_used_peak_gb == 3.0


def test_timeline_is_thinned_but_keeps_peaks() -> None:
    """A long window is pooled to at most N points, each the maximum of its bucket (the spike survives)."""
    samples = [Sample(t=float(i), vllm_rss_gb=1.0, host_used_gb=2.0) for i in range(1000)]
    samples[537] = Sample(t=537.0, vllm_rss_gb=9.0, host_used_gb=2.0)
    points = timeline(samples, start=0.0, max_points=100)
    assert len(points) == 100 and max(p.vllm_rss_gb or 0 for p in points) == 9.0
    assert points[0].t_s == 0.0 and points[-1].t_s == 990.0


def test_timeline_offsets_are_relative_to_the_window_start() -> None:
    """Points carry seconds since the window start, and None where a figure was not read."""
    (point,) = timeline([Sample(t=105.5, vllm_cpu_percent=150.0)], start=100.0)
    assert point.t_s == 5.5 and point.vllm_cpu_percent == 150.0 and point.gpu_mem_used_gb is None


def test_cpu_percent_of_a_busy_process_tree() -> None:
    """The meter reports RSS and a CPU % that rises while this process spins."""
    meter = ProcessTreeMeter()
    rss, first = meter.read(os.getpid())
    sum(i * i for i in range(2_000_000))
    _, second = meter.read(os.getpid())
    assert rss > 0.01 and first == 0.0 and second > 0.0


def test_sampler_records_vllm_cpu_percent() -> None:
    """With a known pid the samples carry CPU % next to RSS; the window has a peak and a mean."""
    sampler = Sampler(None, pid_source=os.getpid, interval_s=10)
    a = sampler.sample_once()
    sum(i * i for i in range(1_000_000))
    b = sampler.sample_once()
    peaks = sampler.peaks(a.t, b.t)
    assert b.vllm_cpu_percent is not None and peaks.vllm_cpu_percent_peak is not None
    assert peaks.vllm_cpu_percent_mean is not None and len(peaks.timeline) == 2
