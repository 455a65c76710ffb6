"""The GPU side of the engine plan: parallel sizes from the engine arguments, the weights each GPU holds, and the
``--gpu-memory-utilization`` that lets vLLM start beside other tenants of a card.

vLLM 0.32's ``request_memory`` (``vllm/v1/worker/utils.py``) raises unless ``free ≥ ceil(total × utilization)`` after
the CUDA context is up, whatever the KV setting (with a set pool it is used for nothing else), so its 0.92 default
cannot start on a card 8 % used elsewhere. The launcher asks for what one GPU needs::

    need = weights / (tp × pp) + KV pool (per worker) + headroom
    headroom = max(GPU_HEADROOM_GB, the predicted peak's share beyond weights and KV)   (:mod:`engine.gpupeak`)
    utilization = ceil_to_0.001(need / total)      (the largest over the GPUs used; capped at 1)

Totals come from NVML or ``nvidia-smi`` for the GPUs ``GPU_DEVICES`` selects, in vLLM's rank order.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.gpus import DeviceMemory
from core.units import GIB
from engine.gpupeak import BatchLimits, ModelShape, StartupPeak, batch_limits, card_sms, has_flag, predict_peak
from engine.gpupeak import weights_from_config as weights_from_config  # re-exported: it lives with the model's shape

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
UTILIZATION_STEPS = 1000
"""The utilization is rounded up to 1/1000 of the card."""


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


def weights_on_disk(folder: Path | None) -> int | None:
    """Bytes of the weight files in ``folder`` (safetensors, else PyTorch bins), or None when there are none."""
    if folder is None or not folder.is_dir():
        return None
    sizes = {p.suffix: 0 for p in folder.iterdir()}
    for path in folder.iterdir():
        if path.suffix in WEIGHT_SUFFIXES and path.is_file():
            sizes[path.suffix] += path.stat().st_size
    found = [sizes[s] for s in WEIGHT_SUFFIXES if sizes.get(s)]
    return found[0] if found else None


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
