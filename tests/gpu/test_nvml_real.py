"""NVML readings against a real GPU: allocate N GiB with torch and see the sampled peak rise by at least N GiB.

Marked ``gpu``; skipped with the reason where no NVIDIA driver/GPU or no CUDA torch exists (as on CI here).
Imports nothing of the settings stack, so it also runs on a bare GPU machine with torch + nvidia-ml-py + pydantic.
"""

from __future__ import annotations

import os
import time

import pytest

from sidecar.sampling.gpu import NvmlReader, open_gpu_reader
from sidecar.sampling.sampler import Sampler

pytestmark = pytest.mark.gpu
ALLOC_GIB = 4


@pytest.fixture(scope="module")
def reader() -> NvmlReader:
    found, reason = open_gpu_reader()
    if found is None:
        pytest.skip(f"no GPU here: {reason}")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    assert isinstance(found, NvmlReader)
    return found


def test_info_names_the_gpu_and_versions(reader: NvmlReader) -> None:
    """NVML reports the GPU model, the driver version and a CUDA version of the form major.minor."""
    info = reader.info()
    assert info.names and "NVIDIA" in info.names[0]
    assert info.driver_version and info.cuda_version and info.cuda_version.count(".") == 1


def test_allocation_raises_sampled_memory(reader: NvmlReader) -> None:
    """Memory used rises by at least the allocated GiB and falls back after freeing."""
    import torch

    before = reader.read()[0].mem_used_gb
    block = torch.ones(ALLOC_GIB * 1024**3, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    during = reader.read()[0].mem_used_gb
    del block
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    after = reader.read()[0].mem_used_gb
    assert during - before >= ALLOC_GIB * 0.99, (before, during)
    assert during - after >= ALLOC_GIB * 0.99, (during, after)


def test_background_sampler_catches_a_transient_peak(reader: NvmlReader) -> None:
    """A 1 s allocation between two idle phases shows up as the window peak of the background sampler."""
    import torch

    sampler = Sampler(reader, pid_source=os.getpid, interval_s=0.05)
    sampler.start()
    try:
        t0 = time.time()
        time.sleep(0.3)
        idle = sampler.latest()
        assert idle is not None and idle.gpu_mem_used_gb is not None
        block = torch.ones(ALLOC_GIB * 1024**3, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        time.sleep(1.0)
        del block
        torch.cuda.empty_cache()
        time.sleep(0.5)
        peaks = sampler.peaks(t0, time.time())
    finally:
        sampler.stop()
    assert peaks.gpu_samples >= 10
    assert peaks.gpu_mem_peak_gb is not None and peaks.gpu_mem_peak_gb - idle.gpu_mem_used_gb >= ALLOC_GIB * 0.99
    assert (sampler.latest().gpu_mem_used_gb or 0) < peaks.gpu_mem_peak_gb - ALLOC_GIB * 0.9  # type: ignore[union-attr]


def _smi_used_mib() -> list[float]:
    """``nvidia-smi``'s memory.used of each GPU, MiB."""
    import subprocess

    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return [float(line) for line in out.split()]


@pytest.mark.parametrize("alloc_gib", [0, ALLOC_GIB])
def test_sampled_memory_agrees_with_nvidia_smi(reader: NvmlReader, alloc_gib: int) -> None:
    """Idle and under an allocation, the sampled GPU memory is within 1 % (floor 16 MiB) of what nvidia-smi shows."""
    import torch

    block = torch.ones(alloc_gib * 1024**3 or 1, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    ours_mib = reader.read()[0].mem_used_gb * 1024
    smi_mib = _smi_used_mib()[0]
    del block
    torch.cuda.empty_cache()
    assert abs(ours_mib - smi_mib) <= max(0.01 * smi_mib, 16.0), (reader.memory_api, ours_mib, smi_mib)


def test_energy_counter_rises_under_load_and_power_samples_agree(reader: NvmlReader) -> None:
    """On a Volta or later card NVML's total-energy counter rises while matrix products run for 5 s, above the idle
    draw; the power samples integrated over the same window agree with it within 35 % (NVML's power reading is a
    1 s average, so it lags the counter at the load's edges)."""
    import torch

    from core.energy import counter_energy, power_energy

    sampler = Sampler(reader, pid_source=os.getpid, interval_s=0.1)
    sampler.start()
    try:
        time.sleep(1.0)
        start = time.time()
        a = torch.randn(8192, 8192, device="cuda")
        while time.time() < start + 5.0:
            a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()
        end = time.time()
        time.sleep(0.5)
    finally:
        sampler.stop()
    samples = sampler.window(start - 1.0, end + 1.0)
    first = samples[0].gpus[0]
    if first.energy_mj is None:
        pytest.skip("this card has no total-energy counter (before Volta): its energy comes from power samples")
    counter = [(s.t, s.gpus[0].energy_mj / 1000.0) for s in samples if s.gpus[0].energy_mj is not None]
    power = [(s.t, s.gpus[0].power_w) for s in samples if s.gpus[0].power_w is not None]
    by_counter, by_power = counter_energy(counter, start, end), power_energy(power, start, end)
    assert by_counter is not None and by_power is not None
    assert by_counter.joules > 0 and (by_counter.mean_w or 0) > 30.0, by_counter
    assert abs(by_power.joules - by_counter.joules) <= 0.35 * by_counter.joules, (by_counter, by_power)
