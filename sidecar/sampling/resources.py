"""Pure summaries of resource samples: peaks (NVML has none: the samples' maxima), means, per-GPU statistics, a
compact time series, and a window's energy: GPU counters, else GPU power, else the host's counters (:mod:`core.energy`);
idle power over :data:`core.energy.IDLE_WINDOW_S` before the run, unless vLLM was busy."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from core.energy import IDLE_WINDOW_S, DeviceEnergy, EnergyStats, Point, device_energy, energy_stats
from core.report_schema import GpuSample, GpuStats, KvCacheStats, ResourcePoint, Resources
from core.units import GIB
from sidecar.sampling.enginemetrics import EngineGauges
from sidecar.sampling.rapl import EnergyZone

MAX_TIMELINE_POINTS = 300
GPU_SCOPE = "GPUs of the engine (NVML)"
HOST_SCOPE = "host CPU packages and DRAM (RAPL / amd_energy)"
Span = tuple[float, float]


@dataclass(frozen=True)
class Sample:
    """One tick: per-GPU readings, vLLM tree RSS (GiB) and CPU (% of a core), host memory in use (GiB); None: unread."""

    t: float
    gpus: list[GpuSample] = field(default_factory=list)
    vllm_rss_gb: float | None = None
    host_used_gb: float | None = None
    vllm_cpu_percent: float | None = None
    engine: EngineGauges | None = None
    """vLLM's KV and queue gauges when they were scraped at this tick (every ENGINE_METRICS_INTERVAL_S)."""
    host_energy_uj: dict[str, int] | None = None
    """The host's RAPL / amd_energy counters by zone, µJ (:mod:`sidecar.sampling.rapl`), where they are read."""

    @property
    def gpu_mem_used_gb(self) -> float | None:
        """Memory used summed over all GPUs (tensor parallelism spreads one model over several)."""
        return sum(g.mem_used_gb for g in self.gpus) if self.gpus else None


def _present(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def peak(values: Sequence[float | None]) -> float | None:
    """Maximum of the present values; None when none is present."""
    present = _present(values)
    return max(present) if present else None


def mean(values: Sequence[float | None]) -> float | None:
    """Mean of the present values; None when none is present."""
    present = _present(values)
    return sum(present) / len(present) if present else None


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


GpuNames = Sequence[str] | Mapping[int, str]
"""Model names by NVML index: a mapping (the GPUs GPU_DEVICES picks), or a list indexed by position."""


def name_of(names: GpuNames, index: int) -> str | None:
    """The model name of GPU ``index`` in ``names``, or None."""
    if isinstance(names, Mapping):
        return names.get(index)
    return names[index] if index < len(names) else None


def gpu_stats(
    samples: Sequence[Sample], names: GpuNames = (), uuids: Mapping[int, str | None] | None = None
) -> list[GpuStats]:
    """Per-GPU memory peak, utilisation and power peaks/means, and the peak memory of other processes, over
    ``samples``, ordered by GPU index."""
    by_index: dict[int, list[GpuSample]] = {}
    for sample in samples:
        for gpu in sample.gpus:
            by_index.setdefault(gpu.index, []).append(gpu)
    out = []
    for index, readings in sorted(by_index.items()):
        out.append(
            GpuStats(
                index=index,
                name=name_of(names, index),
                uuid=(uuids or {}).get(index),
                mem_total_gb=_round(readings[-1].mem_total_gb, 3),
                mem_used_peak_gb=_round(peak([r.mem_used_gb for r in readings]), 4),
                util_percent_peak=_round(peak([r.util_percent for r in readings]), 1),
                util_percent_mean=_round(mean([r.util_percent for r in readings]), 1),
                power_w_peak=_round(peak([r.power_w for r in readings]), 1),
                power_w_mean=_round(mean([r.power_w for r in readings]), 1),
                other_mem_peak_gb=_round(peak([r.other_mem_gb for r in readings]), 4),
            )
        )
    return out


def _pool(bucket: Sequence[Sample], start: float) -> ResourcePoint:
    """One timeline point from a bucket of samples: the bucket's first time and the maximum of each figure."""

    def top(get: Callable[[Sample], float | None], digits: int) -> float | None:
        return _round(peak([get(s) for s in bucket]), digits)

    return ResourcePoint(
        t_s=round(bucket[0].t - start, 3),
        gpu_mem_used_gb=top(lambda s: s.gpu_mem_used_gb, 4),
        vllm_rss_gb=top(lambda s: s.vllm_rss_gb, 4),
        vllm_cpu_percent=top(lambda s: s.vllm_cpu_percent, 1),
        host_mem_used_gb=top(lambda s: s.host_used_gb, 4),
        kv_cache_usage_percent=top(lambda s: s.engine.kv_usage_percent if s.engine else None, 2),
        requests_running=top(lambda s: s.engine.running if s.engine else None, 0),
        requests_waiting=top(lambda s: s.engine.waiting if s.engine else None, 0),
    )


def kv_cache_stats(samples: Sequence[Sample], unavailable_reason: str | None = None) -> KvCacheStats | None:
    """vLLM's KV pool (from the first scrape showing it) and its usage's peaks and mean over ``samples``; None when
    no sample carried vLLM's gauges and no reason is known."""
    scraped = [s.engine for s in samples if s.engine is not None]
    if not scraped:
        return KvCacheStats(unavailable_reason=unavailable_reason) if unavailable_reason else None
    pool = next((g for g in scraped if g.pool_blocks is not None), scraped[0])
    running, waiting = peak([g.running for g in scraped]), peak([g.waiting for g in scraped])
    return KvCacheStats(
        pool_gb=_round(pool.pool_bytes / GIB if pool.pool_bytes else None, 4),
        pool_blocks=pool.pool_blocks,
        block_size_tokens=pool.block_size_tokens,
        pool_tokens=pool.pool_tokens,
        usage_peak_percent=_round(peak([g.kv_usage_percent for g in scraped]), 2),
        usage_mean_percent=_round(mean([g.kv_usage_percent for g in scraped]), 2),
        requests_running_peak=None if running is None else round(running),
        requests_waiting_peak=None if waiting is None else round(waiting),
        samples=len(scraped),
    )


def timeline(samples: Sequence[Sample], start: float, max_points: int = MAX_TIMELINE_POINTS) -> list[ResourcePoint]:
    """The window's samples as at most ``max_points`` points; thinning keeps each bucket's maxima (peaks survive)."""
    if not samples:
        return []
    size = max(1, math.ceil(len(samples) / max_points))
    return [_pool(samples[i : i + size], start) for i in range(0, len(samples), size)]


def summarise(
    samples: Sequence[Sample],
    start: float,
    gpu_names: GpuNames = (),
    engine_reason: str | None = None,
    gpu_uuids: Mapping[int, str | None] | None = None,
) -> Resources:
    """The ``resources`` section's figures of ``samples`` (taken from ``start``): peaks, means, per-GPU statistics,
    KV cache and the thinned time series (no reason, interval or energy); ``engine_reason``: why vLLM's gauges are
    missing."""
    ordered = sorted(samples, key=lambda s: s.t)
    gpu_peak = peak([s.gpu_mem_used_gb for s in ordered])
    return Resources(
        gpu_mem_peak_gb=gpu_peak,
        gpu_samples=len(ordered) if gpu_peak is not None else 0,
        gpus=gpu_stats(ordered, gpu_names, gpu_uuids),
        vllm_rss_peak_gb=peak([s.vllm_rss_gb for s in ordered]),
        vllm_cpu_percent_peak=_round(peak([s.vllm_cpu_percent for s in ordered]), 1),
        vllm_cpu_percent_mean=_round(mean([s.vllm_cpu_percent for s in ordered]), 1),
        host_mem_used_peak_gb=peak([s.host_used_gb for s in ordered]),
        kv_cache=kv_cache_stats(ordered, engine_reason),
        timeline=timeline(ordered, start),
    )


def busy_reason(samples: Sequence[Sample]) -> str | None:
    """Why ``samples`` are not idle (vLLM's gauges show requests in them); None when idle as far as they tell."""
    busy = [s.engine for s in samples if s.engine and ((s.engine.running or 0) > 0 or (s.engine.waiting or 0) > 0)]
    if not busy:
        return None
    most = max((g.running or 0) + (g.waiting or 0) for g in busy)
    return f"vLLM was serving up to {most:.0f} request(s) in the {IDLE_WINDOW_S:g} s before the run: not idle"


def _gpu_devices(samples: Sequence[Sample], window: Span, idle: Span | None, names: GpuNames) -> list[DeviceEnergy]:
    counters: dict[int, list[Point]] = {}
    powers: dict[int, list[Point]] = {}
    for sample in samples:
        for gpu in sample.gpus:
            counters.setdefault(gpu.index, [])
            powers.setdefault(gpu.index, [])
            if gpu.energy_mj is not None:
                counters[gpu.index].append((sample.t, gpu.energy_mj / 1000.0))
            if gpu.power_w is not None:
                powers[gpu.index].append((sample.t, gpu.power_w))
    return [
        device_energy(
            f"GPU {index} {name_of(names, index) or ''}".rstrip(), window, counters[index], powers[index], idle,
            gpu_index=index,
        )
        for index in sorted(counters)
    ]  # fmt: skip


def _host_devices(
    samples: Sequence[Sample], window: Span, idle: Span | None, zones: Sequence[EnergyZone]
) -> list[DeviceEnergy]:
    out = []
    for zone in zones:
        points = [(s.t, s.host_energy_uj[zone.name] / 1e6) for s in samples
                  if s.host_energy_uj and zone.name in s.host_energy_uj]  # fmt: skip
        wrap_j = zone.max_range_uj / 1e6 if zone.max_range_uj else None
        out.append(device_energy(zone.name, window, points, (), idle, wrap_j, zone.method))
    return out


def window_energy(
    samples_in: Callable[[float, float], list[Sample]],
    start: float,
    end: float,
    idle_end: float,
    *,
    gpu_names: GpuNames = (),
    zones: Sequence[EnergyZone] = (),
    sample_interval_s: float | None = None,
    gpu_reason: str | None = None,
    host_reason: str | None = None,
) -> EnergyStats:
    """Energy over ``[start, end]`` (Unix s) and idle power over the :data:`IDLE_WINDOW_S` before ``idle_end``, from
    ``samples_in(lo, hi)``: the GPUs', else the host zones', else none with why (``gpu_reason``, ``host_reason``)."""
    idle_start = idle_end - IDLE_WINDOW_S
    margin = 1.0 + 4 * (sample_interval_s or 0.5)  # around the window: samples to interpolate its bounds, s
    samples = samples_in(min(start, idle_start) - margin, end + margin)
    quiet = [s for s in samples if idle_start <= s.t <= idle_end]
    busy = busy_reason(quiet)
    idle = None if busy else (idle_start, idle_end)
    inside = [s for s in samples if start <= s.t <= end]
    if any(s.gpus for s in samples):
        devices, scope = _gpu_devices(samples, (start, end), idle, gpu_names), GPU_SCOPE
    elif zones and any(s.host_energy_uj for s in samples):
        devices, scope = _host_devices(samples, (start, end), idle, zones), HOST_SCOPE
    else:
        why = host_reason or "no energy counter sampled in the window"
        gpus = f"no GPU energy ({gpu_reason})" if gpu_reason else "no GPU energy"
        return EnergyStats(
            window_start=start, window_s=end - start, unavailable_reason=f"{gpus}; no host energy: {why}",
            sample_interval_s=sample_interval_s,
        )  # fmt: skip
    stats = energy_stats(devices, (start, end), scope, sample_interval_s, IDLE_WINDOW_S, busy)
    if not inside and stats.energy_j is not None:
        stats.notes.append("no sample inside the window: its energy is interpolated between the samples around it")
    return stats
