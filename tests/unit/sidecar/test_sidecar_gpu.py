"""GPU reading through the NVML interface (fake NVML here; the real one is checked on a GPU, see test_gpu_real)."""

from __future__ import annotations

import pytest

from sidecar.sampling.gpu import NvmlReader, open_gpu_reader
from sidecar.sampling.sampler import Sampler
from tests.fakes import FakeNvml

GIB = 1024**3


def test_reader_converts_units() -> None:
    """Memory in GiB, power in W, CUDA driver version as major.minor."""
    reader = NvmlReader(FakeNvml(used_bytes=[20 * GIB]))
    (sample,) = reader.read()
    assert sample.mem_used_gb == pytest.approx(20.0) and sample.mem_total_gb == pytest.approx(141.0)
    assert sample.power_w == pytest.approx(350.0) and sample.util_percent == 42.0
    info = reader.info()
    assert info.names == ["NVIDIA H200"] and info.cuda_version == "12.8" and info.driver_version == "570.86.15"


def test_init_failure_becomes_reason() -> None:
    """An NVML that cannot initialise raises RuntimeError carrying the reason."""
    with pytest.raises(RuntimeError, match="NVML unavailable: Driver Not Loaded"):
        NvmlReader(FakeNvml(fail_init=OSError("Driver Not Loaded")))


def test_no_gpu_here_is_none_with_reason() -> None:
    """On this GPU-less machine the real NVML gives (None, reason), never a crash."""
    reader, reason = open_gpu_reader()
    if reader is not None:
        pytest.skip("a GPU is present")
    assert reason and "NVML" in reason


def test_peak_is_max_of_samples_in_window() -> None:
    """The window peak is the maximum summed GPU memory of the samples taken inside the window."""
    fake = FakeNvml(names=["A", "B"], used_bytes=[GIB, 2 * GIB])
    sampler = Sampler(NvmlReader(fake), pid_source=lambda: None, interval_s=10)
    first = sampler.sample_once()
    fake.used_bytes = [5 * GIB, 2 * GIB]
    sampler.sample_once()
    fake.used_bytes = [GIB, GIB]
    last = sampler.sample_once()
    peaks = sampler.peaks(first.t, last.t)
    assert peaks.gpu_samples == 3 and peaks.gpu_mem_peak_gb == pytest.approx(7.0)
    assert sampler.peaks(last.t + 1, last.t + 2).gpu_mem_peak_gb is None


def test_unknown_vllm_pid_leaves_cpu_figure_empty_with_reason() -> None:
    """Without the engine pid there is no RSS figure, and the reason says why."""
    sampler = Sampler(None, pid_source=lambda: None)
    sample = sampler.sample_once()
    assert sample.vllm_rss_gb is None and sampler.cpu_unavailable_reason
    assert sample.host_used_gb and sample.host_used_gb > 0


def test_process_tree_rss_of_this_process() -> None:
    """The CPU-side figure reads a real process tree's RSS (this test process)."""
    import os

    sampler = Sampler(None, pid_source=os.getpid)
    assert (sampler.sample_once().vllm_rss_gb or 0) > 0.01


def test_memory_is_read_as_nvidia_smi_shows_it() -> None:
    """With NVML's v2 struct, used excludes the driver's reservation (an idle H200 reads 0, not 615 MiB)."""
    reader = NvmlReader(FakeNvml(used_bytes=[0]))
    (sample,) = reader.read()
    assert reader.memory_api == "nvml_v2"
    assert sample.mem_used_gb == 0.0 and sample.mem_reserved_gb == pytest.approx(615 / 1024)


def test_older_drivers_fall_back_to_v1_and_say_so() -> None:
    """Without nvmlDeviceGetMemoryInfo_v2 the v1 figure (reservation included) is used, marked nvml_v1."""
    reader = NvmlReader(FakeNvml(used_bytes=[0], has_v2=False))
    (sample,) = reader.read()
    assert reader.memory_api == "nvml_v1"
    assert sample.mem_used_gb == pytest.approx(615 / 1024) and sample.mem_reserved_gb is None
