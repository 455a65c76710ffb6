"""The GPU side of the engine plan: parallel sizes from the engine arguments, the weights each GPU holds, and the
``--gpu-memory-utilization`` that lets vLLM start beside other tenants of a card.

vLLM 0.32's ``request_memory`` (``vllm/v1/worker/utils.py``) raises unless ``free ≥ ceil(total × utilization)`` after
the CUDA context is up, whatever the KV setting (with a set pool it is used for nothing else), so its 0.92 default
cannot start on a card 8 % used elsewhere. The launcher asks for what one GPU needs::

    need = weights / (tp × pp) + KV pool (per worker) + headroom
    headroom = max(GPU_HEADROOM_GB, the predicted peak's share beyond weights and KV)   (:mod:`engine.gpupeak`)
    utilization = ceil_to_0.001(need / total)      (the largest over the GPUs used; capped at 1)

Totals come from NVML (``pynvml``) when it loads, else ``nvidia-smi``'s CSV query (:func:`host_gpus`, also what ``make
doctor`` sees; neither: no GPU, an empty list and the reason), for the GPUs ``GPU_DEVICES`` selects, in vLLM's rank
order.
"""

from __future__ import annotations

import math
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.gpus import DeviceMemory
from core.units import GIB, MIB
from engine.gpupeak import BatchLimits, ModelShape, StartupPeak, batch_limits, card_sms, has_flag, predict_peak

UTILIZATION_STEPS = 1000
"""The utilization is rounded up to 1/1000 of the card."""
SMI_QUERY = ["--query-gpu=index,uuid,name,memory.total,memory.free,driver_version", "--format=csv,noheader,nounits"]


@dataclass(frozen=True)
class ParallelSizes:
    """Tensor, pipeline and data parallel sizes vLLM will run with (1 when not given)."""

    tensor: int = 1
    pipeline: int = 1
    data: int = 1

    @property
    def gpus(self) -> int:
        """GPUs vLLM uses: ``tensor × pipeline × data``."""
        return self.tensor * self.pipeline * self.data


_FLAGS = {
    "--tensor-parallel-size": "tensor",
    "-tp": "tensor",
    "--pipeline-parallel-size": "pipeline",
    "-pp": "pipeline",
    "--data-parallel-size": "data",
    "-dp": "data",
}


def parallel_sizes(extra_args: str) -> ParallelSizes:
    """Parallel sizes named in ``extra_args`` (VLLM_EXTRA_ARGS; compose's ENGINE_TENSOR_PARALLEL_SIZE
    arrives there too); the last of a repeated flag wins, as in argparse.

    Raises:
        ValueError: the arguments do not parse, or a size is not a positive integer.
    """
    words = shlex.split(extra_args)
    sizes: dict[str, int] = {}
    for i, word in enumerate(words):
        flag, eq, inline = word.partition("=")
        if flag not in _FLAGS:
            continue
        value = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{flag} needs a positive integer, got {value!r}")
        sizes[_FLAGS[flag]] = int(value)
    return ParallelSizes(**sizes)


@dataclass(frozen=True)
class MemoryPlan:
    """What vLLM needs on each GPU it uses (bytes) and the utilization that asks for exactly that."""

    weights_bytes: int
    kv_cache_bytes: int
    headroom_bytes: int
    parallel: ParallelSizes
    devices: tuple[DeviceMemory, ...]
    limits: BatchLimits | None = None
    peak: StartupPeak | None = None

    @property
    def weights_per_gpu_bytes(self) -> int:
        """Weights split over the tensor and pipeline ranks (rounded up)."""
        return -(-self.weights_bytes // (self.parallel.tensor * self.parallel.pipeline))

    @property
    def need_bytes(self) -> int:
        """Per GPU: weights share + KV pool + headroom (after vLLM's CUDA context, as ``request_memory`` counts)."""
        return self.weights_per_gpu_bytes + self.kv_cache_bytes + self.needed_headroom_bytes

    @property
    def needed_headroom_bytes(self) -> int:
        """GPU_HEADROOM_GB, or more where the predicted peak needs more beyond weights and KV pool."""
        return max(self.headroom_bytes, self.peak.beyond_weights_and_kv_bytes if self.peak else 0)

    @property
    def utilization(self) -> float | None:
        """``need / total`` rounded up to 0.001, the largest over :attr:`devices`, at most 1; None without totals."""
        if not self.devices:
            return None
        worst = max(self.need_bytes / d.total_bytes for d in self.devices)
        return min(1.0, math.ceil(round(worst * UTILIZATION_STEPS, 6)) / UTILIZATION_STEPS)

    def short_of(self) -> list[tuple[DeviceMemory, int]]:
        """GPUs with less free memory than vLLM will request (``utilization × total``), with those bytes."""
        util = self.utilization
        if util is None:
            return []
        out = []
        for device in self.devices:
            requested = math.ceil(device.total_bytes * util)
            if device.free_bytes is not None and device.free_bytes < requested:
                out.append((device, requested))
        return out

    def describe(self) -> str:
        """The arithmetic for the start-up log, GiB."""
        util = self.utilization
        p = self.parallel
        split = f" / (TP {p.tensor} × PP {p.pipeline})" if p.tensor * p.pipeline > 1 else ""
        weights = f"{self.weights_bytes / GIB:.2f} GiB{split}" if self.weights_bytes else "unknown (0)"
        head = (
            f"GPU memory per GPU: weights {weights} + KV {self.kv_cache_bytes / GIB:g}"
            f" GiB + headroom {self.needed_headroom_bytes / GIB:.2f} GiB = {self.need_bytes / GIB:.2f} GiB"
        )
        if util is None:
            return head + "; card size unknown: --gpu-memory-utilization left to vLLM"
        cards = ", ".join(
            f"GPU {d.label} {d.total_bytes / GIB:.2f} GiB total"
            + (f" / {d.free_bytes / GIB:.2f} free" if d.free_bytes is not None else "")
            for d in self.devices
        )
        return f"{head}; --gpu-memory-utilization {util:.3f} of {cards}"

    def log_lines(self) -> list[str]:
        """The start-up lines: the arithmetic, the predicted peak, a warning per GPU short of memory."""
        lines = [f"[INFO] {self.describe()}"]
        if self.peak is not None:
            lines.append(f"[INFO] {self.peak.line()}")
        for device, requested in self.short_of():
            lines.append(
                f"[WARNING] GPU {device.label}: {(device.free_bytes or 0) / GIB:.2f} GiB free < "
                f"{requested / GIB:.2f} GiB vLLM will request (it refuses to start): free memory there, lower "
                "KV_CACHE_GB or GPU_HEADROOM_GB, or pick another GPU with GPU_DEVICES (make doctor)"
            )
        return lines


def memory_plan(
    weights_bytes: int,
    kv_cache_bytes: int,
    headroom_gb: float,
    parallel: ParallelSizes,
    devices: Sequence[DeviceMemory],
    limits: BatchLimits | None = None,
    peak: StartupPeak | None = None,
) -> MemoryPlan:
    """The per-GPU plan for the first ``parallel.gpus`` of ``devices`` (vLLM's ranks take them in order)."""
    return MemoryPlan(
        weights_bytes=weights_bytes,
        kv_cache_bytes=kv_cache_bytes,
        headroom_bytes=int(headroom_gb * GIB),
        parallel=parallel,
        devices=tuple(devices[: parallel.gpus]),
        limits=limits,
        peak=peak,
    )


def startup_peak(
    config: Mapping[str, Any] | None,
    dtype_bytes: int,
    weights_bytes: int,
    kv_cache_bytes: int,
    extra_args: str,
    parallel: ParallelSizes,
    devices: Sequence[DeviceMemory],
) -> tuple[BatchLimits, StartupPeak | None]:
    """The GPU build's batch limits and the start-up peak of one GPU they give for ``config``'s model
    (None when unknown); on a known card the sampler buffer is sized by its multiprocessors."""
    limits = batch_limits(extra_args)
    shape = ModelShape.from_config(config, dtype_bytes) if config else None
    if shape is None:
        return limits, None
    known = [card_sms(d.name) for d in devices[: parallel.gpus]]
    sms = max(s for s in known if s) if known and None not in known else None
    per_gpu = -(-weights_bytes // (parallel.tensor * parallel.pipeline))
    peak = predict_peak(shape, per_gpu, kv_cache_bytes, limits, parallel.tensor, parallel.gpus, sms=sms,
                        enforce_eager=has_flag(extra_args, "--enforce-eager"))  # fmt: skip
    return limits, peak


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
