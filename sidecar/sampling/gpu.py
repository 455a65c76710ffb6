"""GPU readings through NVML (``pynvml``) of the GPUs ``GPU_DEVICES`` picks; missing hardware is None plus a reason.

Memory as ``nvidia-smi`` shows it: NVML's v2 memory call (drivers from R510) leaves the driver-reserved memory out of
``used`` (idle H200: v1 615 MiB used, v2 0), v1 the fallback (:attr:`NvmlReader.memory_api`); figures in GiB.
Energy: NVML's total-energy counter (mJ, Volta and later; a card without it is asked once) beside the power (mW).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from core.gpus import DeviceMemory, select_devices
from core.report_schema import GpuSample
from core.units import GIB


@dataclass(frozen=True)
class GpuInfo:
    """Static facts of the GPUs read: names, NVML indices and UUIDs (same order), driver and its maximum CUDA."""

    names: list[str]
    driver_version: str | None
    cuda_version: str | None
    indices: list[int] = field(default_factory=list)
    uuids: list[str | None] = field(default_factory=list)

    def name_by_index(self) -> dict[int, str]:
        """Model name of each GPU read, by NVML index."""
        return dict(zip(self.indices or range(len(self.names)), self.names, strict=False))


class GpuReader(Protocol):
    """What the sampler needs from a GPU backend (NVML here, a fake in tests)."""

    memory_api: str  # how memory is read, e.g. nvml_v2

    def info(self) -> GpuInfo:
        """Static facts about the GPUs."""
        ...

    def read(self, engine_pids: frozenset[int] | None = None) -> list[GpuSample]:
        """One sample per GPU, now (``engine_pids``: the engine's processes, to tell other tenants' memory)."""
        ...


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlReader:
    """Reads memory, utilisation and power of every GPU through NVML. Raises RuntimeError: at construction, when NVML
    cannot be loaded or initialised (no driver, no GPU); the message is the reason shown in reports."""

    def __init__(self, nvml: Any | None = None, devices: str | None = None) -> None:
        if nvml is None:
            try:
                import pynvml
            except ImportError as exc:  # pragma: no cover - nvidia-ml-py is in the app env
                raise RuntimeError(f"nvidia-ml-py not installed: {exc}") from exc
            nvml = pynvml
        self._nvml: Any = nvml
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
        except Exception as exc:  # NVMLError and OSError subclasses differ by driver version
            raise RuntimeError(f"NVML unavailable: {exc}") from exc
        if count == 0:
            raise RuntimeError("NVML found no GPU")
        every = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self._uuids: dict[int, str | None] = {}
        for index, handle in enumerate(every):
            try:
                self._uuids[index] = _text(nvml.nvmlDeviceGetUUID(handle))
            except Exception:  # old drivers, MIG slices
                self._uuids[index] = None
        known = [DeviceMemory(i, self._uuids[i], None, 0) for i in range(count)]
        self._indices = [d.index for d in select_devices(devices, known)]
        if not self._indices:
            raise RuntimeError(f"GPU_DEVICES={devices!r} names none of NVML's {count} GPU(s): use indices or UUIDs")
        self._handles = [every[i] for i in self._indices]
        self._no_energy_counter: set[int] = set()  # NVML indices whose card answered NotSupported
        self.memory_api = "nvml_v1"
        version = getattr(nvml, "nvmlMemory_v2", None)
        if version is not None:
            with contextlib.suppress(Exception):  # NVMLError_FunctionNotFound / NotSupported on older drivers
                nvml.nvmlDeviceGetMemoryInfo(self._handles[0], version=version)
                self.memory_api = "nvml_v2"

    def _memory(self, handle: Any) -> tuple[float, float, float | None]:
        """``(used, total, reserved or None)`` bytes, by :attr:`memory_api`."""
        if self.memory_api == "nvml_v2":
            mem = self._nvml.nvmlDeviceGetMemoryInfo(handle, version=self._nvml.nvmlMemory_v2)
            return mem.used, mem.total, mem.reserved
        mem = self._nvml.nvmlDeviceGetMemoryInfo(handle)
        return mem.used, mem.total, None

    def info(self) -> GpuInfo:
        """Model names, driver version and CUDA driver version (``12.4`` from NVML's integer 12040)."""
        nvml = self._nvml
        names = [_text(nvml.nvmlDeviceGetName(h)) for h in self._handles]
        uuids = [self._uuids[i] for i in self._indices]
        driver = cuda = None
        try:
            driver = _text(nvml.nvmlSystemGetDriverVersion())
            raw = int(nvml.nvmlSystemGetCudaDriverVersion())
            cuda = f"{raw // 1000}.{(raw % 1000) // 10}"
        except Exception:  # older drivers lack one of these calls
            pass
        return GpuInfo(names, driver, cuda, indices=list(self._indices), uuids=uuids)

    def _other_bytes(self, handle: Any, engine_pids: frozenset[int] | None) -> int | None:
        """Bytes of NVML's processes on ``handle`` outside ``engine_pids``; None when NVML cannot tell."""
        if not engine_pids:
            return None
        try:
            procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except Exception:  # not supported, or no permission
            return None
        pids = {int(p.pid) for p in procs}
        if not pids & engine_pids:
            return None
        return sum(int(p.usedGpuMemory or 0) for p in procs if int(p.pid) not in engine_pids)

    def _energy_mj(self, index: int, handle: Any) -> float | None:
        """NVML's total-energy counter of the GPU, mJ; None (and not asked again) where the card has none."""
        if index in self._no_energy_counter:
            return None
        try:
            return float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        except Exception as exc:  # NVMLError_NotSupported before Volta and on some MIG slices; others pass
            if "NotSupported" in type(exc).__name__ or "not supported" in str(exc).lower():
                self._no_energy_counter.add(index)
            return None

    def read(self, engine_pids: frozenset[int] | None = None) -> list[GpuSample]:
        """Memory used/total/reserved and other processes' (GiB), utilisation (%), power (W), energy (mJ) per GPU."""
        nvml = self._nvml
        now = time.time()
        samples = []
        for index, handle in zip(self._indices, self._handles, strict=True):
            used, total, reserved = self._memory(handle)
            util = power = None
            with contextlib.suppress(Exception):  # not supported on some devices (MIG slices)
                util = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            with contextlib.suppress(Exception):
                power = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            other = self._other_bytes(handle, engine_pids)
            samples.append(GpuSample(
                t=now, index=index, mem_used_gb=used / GIB, mem_total_gb=total / GIB,
                mem_reserved_gb=None if reserved is None else reserved / GIB, util_percent=util, power_w=power,
                energy_mj=self._energy_mj(index, handle), other_mem_gb=None if other is None else other / GIB,
            ))  # fmt: skip
        return samples


def open_gpu_reader(devices: str | None = None) -> tuple[GpuReader | None, str | None]:
    """An NVML reader of the GPUs ``devices`` (GPU_DEVICES) picks, or ``(None, reason)`` (never raises)."""
    try:
        return NvmlReader(devices=devices), None
    except RuntimeError as exc:
        return None, str(exc)
