"""The host's GPUs as the launcher and ``make doctor`` see them: NVML (``pynvml``) when it loads, else ``nvidia-smi``'s
CSV query; neither: no GPU (an empty list and the reason). Never raises.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.gpus import DeviceMemory

MIB = 1024**2
SMI_QUERY = ["--query-gpu=index,uuid,name,memory.total,memory.free,driver_version", "--format=csv,noheader,nounits"]


@dataclass(frozen=True)
class HostGpus:
    """Every GPU of the host (NVML order), the driver version, and why there are none when the list is empty."""

    devices: list[DeviceMemory] = field(default_factory=list)
    driver_version: str | None = None
    reason: str | None = None
    source: str | None = None  # nvml or nvidia-smi


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def from_nvml(nvml: Any) -> HostGpus:
    """Devices through an NVML module (``pynvml`` or a fake with its names); the reason when it fails."""
    try:
        nvml.nvmlInit()
        devices = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            devices.append(
                DeviceMemory(
                    index=index,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    total_bytes=int(mem.total),
                    free_bytes=int(mem.free),
                )
            )
        driver = _text(nvml.nvmlSystemGetDriverVersion())
    except Exception as exc:  # NVMLError and OSError subclasses differ by driver version
        return HostGpus(reason=f"NVML unavailable: {exc}")
    return HostGpus(devices, driver, None if devices else "NVML found no GPU", "nvml")


def parse_nvidia_smi(text: str) -> HostGpus:
    """Devices from ``nvidia-smi`` run with :data:`SMI_QUERY` (memory in MiB)."""
    devices, driver = [], None
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 6 or not cells[0].isdigit():
            continue
        try:
            total, free = int(float(cells[3]) * MIB), int(float(cells[4]) * MIB)
        except ValueError:
            continue
        devices.append(DeviceMemory(int(cells[0]), cells[1] or None, cells[2] or None, total, free))
        driver = cells[5] or driver
    return HostGpus(devices, driver, None if devices else "nvidia-smi listed no GPU", "nvidia-smi")


def from_nvidia_smi(run: Callable[[list[str]], subprocess.CompletedProcess[str]] | None = None) -> HostGpus:
    """Devices from the ``nvidia-smi`` on PATH (``run`` replaces the call in tests)."""
    exe = shutil.which("nvidia-smi")
    if exe is None and run is None:
        return HostGpus(reason="nvidia-smi not found")
    runner = run or (lambda cmd: subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False))
    try:
        done = runner([exe or "nvidia-smi", *SMI_QUERY])
    except (OSError, subprocess.SubprocessError) as exc:
        return HostGpus(reason=f"nvidia-smi failed: {exc}")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout or "").strip().splitlines()
        return HostGpus(reason=f"nvidia-smi failed: {tail[-1] if tail else f'exit {done.returncode}'}")
    return parse_nvidia_smi(done.stdout)


def host_gpus(nvml: Any | None = None) -> HostGpus:
    """NVML first (``nvml`` or ``pynvml``), then ``nvidia-smi``; the first reason when both fail."""
    if nvml is None:
        try:
            import pynvml

            nvml = pynvml
        except ImportError:
            nvml = None
    first = from_nvml(nvml) if nvml is not None else HostGpus(reason="nvidia-ml-py not installed")
    if first.devices:
        return first
    second = from_nvidia_smi()
    return second if second.devices else HostGpus(reason=first.reason)
