"""The energy of a window from the sampler's samples (pure): GPU counters, else GPU power, else the host's counters
(:mod:`core.energy`); idle power over :data:`core.energy.IDLE_WINDOW_S` before the run, unless vLLM was busy."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from core.energy import IDLE_WINDOW_S, DeviceEnergy, EnergyStats, Point, device_energy, energy_stats
from sidecar.sampling.rapl import EnergyZone
from sidecar.sampling.resources import GpuNames, Sample, name_of

GPU_SCOPE = "GPUs of the engine (NVML)"
HOST_SCOPE = "host CPU packages and DRAM (RAPL / amd_energy)"
Span = tuple[float, float]


def _margin_s(interval_s: float | None) -> float:
    """How far around a window samples are taken to interpolate its bounds, s."""
    return 1.0 + 4 * (interval_s or 0.5)


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
    margin = _margin_s(sample_interval_s)
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
