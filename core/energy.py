"""Energy of a measured window (pure): joules from energy counters or power samples, idle power; a
cluster's: every serving host's (PEER_SIDECARS) summed, and each local replica's GPUs over the tokens it generated.

Counters (NVML total energy, mJ; RAPL / amd_energy, uJ, unwrapped at their range) give the increase over the window,
interpolated linearly at its bounds; power samples (NVML, mW) are integrated by trapezoids. Where samples do not
reach a bound, the mean power over the covered span times the window (``covered_s``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from pydantic import BaseModel, Field

from core.records import RequestRecord

Point = tuple[float, float]
"""``(Unix time s, value)``: a counter reading in J, or a power reading in W."""

NO_ENERGY_GAP = "energy not available: "
"""How a report's ``gaps`` line for a run without energy begins (the terminal's ``[ENERGY] n/a`` line says it)."""
IDLE_WINDOW_S = 10.0
"""The idle power is the mean over this many seconds before the run's first request (warm-up included), s."""
MIN_COVERED_SHARE = 0.9
"""A window whose samples cover less than this share of it gets a note (its energy is extrapolated)."""


@dataclass(frozen=True)
class Integral:
    """Energy over the span ``[start_s, end_s]`` (Unix s) that the samples cover, J, from ``samples`` readings."""

    joules: float
    start_s: float
    end_s: float
    samples: int

    @property
    def covered_s(self) -> float:
        """Seconds of the span."""
        return self.end_s - self.start_s

    @property
    def mean_w(self) -> float | None:
        """Mean power over the span, W (None for an empty span)."""
        return self.joules / self.covered_s if self.covered_s > 0 else None


def unwrap(points: Sequence[Point], wrap_j: float | None = None) -> list[Point]:
    """A counter's readings as a non-decreasing cumulative series from its first reading, J. A drop is a wrap (increase
    ``new + wrap_j - old``) with ``wrap_j`` (RAPL's range), else a counter restart (increase ``new``)."""
    ordered = sorted(points)
    if not ordered:
        return []
    total, out = 0.0, [(ordered[0][0], 0.0)]
    for (_, old), (t, new) in pairwise(ordered):
        step = new - old
        if step < 0:
            step = new - old + wrap_j if wrap_j else new
        total += step
        out.append((t, total))
    return out


def _at(points: Sequence[Point], t: float) -> float:
    """The series' value at ``t`` (inside its span), linear between the readings around it."""
    for (t0, v0), (t1, v1) in pairwise(points):
        if t0 <= t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return points[-1][1] if t >= points[-1][0] else points[0][1]


def _span(points: Sequence[Point], start: float, end: float) -> tuple[float, float] | None:
    lo, hi = max(start, points[0][0]), min(end, points[-1][0])
    return (lo, hi) if hi > lo else None


def counter_energy(points: Sequence[Point], start: float, end: float, wrap_j: float | None = None) -> Integral | None:
    """Energy over ``[start, end]`` from cumulative counter readings, J: the increase between the bounds, each
    interpolated linearly (pass the readings just outside too). None when they cover no part of the window."""
    series = unwrap(points, wrap_j)
    if len(series) < 2 or (span := _span(series, start, end)) is None:
        return None
    lo, hi = span
    inside = sum(lo <= t <= hi for t, _ in series)
    return Integral(_at(series, hi) - _at(series, lo), lo, hi, inside)


def power_energy(points: Sequence[Point], start: float, end: float) -> Integral | None:
    """Energy over ``[start, end]`` from power readings (W) by trapezoids; None when none cover it."""
    series = sorted(points)
    if len(series) < 2 or (span := _span(series, start, end)) is None:
        return None
    lo, hi = span
    inner = [(t, w) for t, w in series if lo < t < hi]
    edges = [(lo, _at(series, lo)), *inner, (hi, _at(series, hi))]
    joules = sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in pairwise(edges))
    return Integral(joules, lo, hi, len(inner) + sum(t in (lo, hi) for t, _ in series))


class DeviceEnergy(BaseModel):
    """One measured device over the window: a GPU (NVML) or a RAPL / amd_energy zone of the host."""

    device: str = Field(description="e.g. 'GPU 0 NVIDIA H100 80GB HBM3', 'package-0', 'dram', 'Esocket0'.")
    gpu_index: int | None = Field(default=None, description="NVML index of a GPU; None for a host zone.")
    method: str | None = Field(
        default=None,
        description="nvml_energy_counter (NVML's total-energy counter, mJ), nvml_power_samples (NVML power readings "
        "integrated), rapl_energy_counter (powercap energy_uj) or amd_energy_counter (hwmon energyN_input).",
    )
    energy_j: float | None = Field(default=None, description="Energy over the window, J.")
    power_w_mean: float | None = Field(default=None, description="Mean power over the window, W.")
    covered_s: float | None = Field(default=None, description="Seconds of the window the samples covered.")
    samples: int = 0
    idle_power_w: float | None = Field(default=None, description="Mean power before the run, W (see EnergyStats).")
    unavailable_reason: str | None = Field(default=None, description="Why this device has no figure.")


class ReplicaEnergy(BaseModel):
    """One local engine replica behind the router: the energy of its GPUs and the tokens it generated."""

    replica: str = Field(description="The replica's name as the cluster view has it (vllm, vllm-1, ...).")
    gpu_indices: list[int] = Field(description="NVML indices of its GPUs (GPU_DEVICES split as the launcher splits).")
    energy_j: float | None = None
    output_tokens: int | None = Field(default=None, description="vllm:generation_tokens over the window.")
    energy_j_per_output_token: float | None = None


class EnergyStats(BaseModel):
    """Energy of the engine's devices over a window (``resources.energy``; per host in ``resources.hosts``): the
    engine's GPUs through NVML, else (the CPU build) the host's RAPL / amd_energy counters; None figures with
    ``unavailable_reason`` where neither can be read. docs/energy.md defines every figure."""

    scope: str | None = Field(
        default=None, description="What was measured: 'GPUs of the engine (NVML)' or 'host CPU packages (RAPL)'."
    )
    method: str | None = Field(
        default=None,
        description="How: nvml_energy_counter, nvml_power_samples, rapl_energy_counter, amd_energy_counter, or mixed "
        "(devices differ: see devices).",
    )
    sample_interval_s: float | None = Field(default=None, description="The sidecar's sampling interval, s.")
    window_start: float | None = Field(default=None, description="Unix time the energy window began, s.")
    window_s: float | None = Field(
        default=None, description="The window measured: first measured send to last end (as the throughput), s."
    )
    covered_s: float | None = Field(
        default=None, description="Seconds of the window the samples covered (the least over devices)."
    )
    energy_j: float | None = Field(default=None, description="Energy over the window, summed over devices, J.")
    power_w_mean: float | None = Field(default=None, description="energy_j / window_s, W.")
    idle_power_w: float | None = Field(
        default=None, description="Mean power before the run (IDLE_WINDOW_S before its first request), W."
    )
    idle_window_s: float | None = Field(default=None, description="Seconds the idle figure was measured over.")
    idle_unavailable_reason: str | None = Field(default=None, description="Why there is no idle figure.")
    energy_above_idle_j: float | None = Field(
        default=None, description="energy_j - idle_power_w x window_s: what the load added to idling, J."
    )
    devices: list[DeviceEnergy] = Field(default_factory=list)
    replicas: list[ReplicaEnergy] = Field(
        default_factory=list, description="Per local replica behind the router (GPU builds; empty otherwise)."
    )
    unavailable_reason: str | None = Field(
        default=None, description="Why there is no energy figure (no NVML and no readable RAPL counter, and why)."
    )
    notes: list[str] = Field(default_factory=list)


def one_method(methods: Iterable[str | None]) -> str | None:
    """The one method of several measurements (``mixed`` when they differ; None when none has one)."""
    named = sorted({m for m in methods if m})
    return named[0] if len(named) == 1 else "mixed" if named else None


def device_energy(
    device: str,
    window: tuple[float, float],
    counter_j: Sequence[Point] = (),
    power_w: Sequence[Point] = (),
    idle: tuple[float, float] | None = None,
    wrap_j: float | None = None,
    counter_method: str = "nvml_energy_counter",
    gpu_index: int | None = None,
) -> DeviceEnergy:
    """One device over ``window`` (Unix s): from counters (J) when they cover it, else power (W,
    ``nvml_power_samples``); idle mean power likewise. Energy = covered span's mean power x window."""
    start, end = window
    found = counter_energy(counter_j, start, end, wrap_j)
    method = counter_method
    if found is None:
        found, method = power_energy(power_w, start, end), "nvml_power_samples"
    if found is None or found.mean_w is None:
        why = "no sample of its energy counter or power before and after the window" if counter_j or power_w else (
            "neither an energy counter nor power readings (not supported by this device)")
        return DeviceEnergy(device=device, gpu_index=gpu_index, unavailable_reason=why)
    idle_w = None
    if idle is not None:
        quiet = counter_energy(counter_j, *idle, wrap_j) if method != "nvml_power_samples" else None
        quiet = quiet or power_energy(power_w, *idle)
        idle_w = quiet.mean_w if quiet else None
    return DeviceEnergy(
        device=device,
        gpu_index=gpu_index,
        method=method,
        energy_j=found.mean_w * (end - start),
        power_w_mean=found.mean_w,
        covered_s=found.covered_s,
        samples=found.samples,
        idle_power_w=idle_w,
    )


def measured_bounds(records: Sequence[RequestRecord]) -> tuple[float, float] | None:
    """First send and last end (Unix s) of the measured rows that ended; None without such rows."""
    rows = [r for r in records if r.phase == "measured" and r.error_kind != "incomplete"]
    if not rows:
        return None
    return min(r.started_at for r in rows), max(r.ended_at for r in rows)


def first_send(records: Sequence[RequestRecord]) -> float | None:
    """When the run's first request (warm-up included) was sent, Unix s; None without rows."""
    return min((r.started_at for r in records), default=None)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``; None when either is missing or the denominator is 0."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def energy_stats(
    devices: Sequence[DeviceEnergy],
    window: tuple[float, float],
    scope: str,
    sample_interval_s: float | None = None,
    idle_window_s: float | None = None,
    idle_unavailable_reason: str | None = None,
) -> EnergyStats:
    """The window's :class:`EnergyStats`: total (None when a device has none), mean power, idle power and the energy
    above it; notes where samples covered under :data:`MIN_COVERED_SHARE` or a device gave nothing."""
    start, end = window
    window_s = end - start
    missing = not devices or any(d.energy_j is None for d in devices)
    total = None if missing else sum(d.energy_j or 0.0 for d in devices)
    covered = [d.covered_s for d in devices if d.covered_s is not None]
    idle = [d.idle_power_w for d in devices]
    idle_w = sum(v or 0.0 for v in idle) if idle and None not in idle else None
    notes = [f"{d.device}: {d.unavailable_reason}" for d in devices if d.unavailable_reason]
    if covered and window_s > 0 and min(covered) < MIN_COVERED_SHARE * window_s:
        notes.append(
            f"the samples covered {min(covered):.1f} s of the {window_s:.1f} s window: its energy is the covered "
            "span's mean power times the window"
        )
    if idle_w is None and idle_unavailable_reason is None and devices:
        idle_unavailable_reason = "no samples before the run (the sidecar started after it, or it ran right after "\
            "another)"
    return EnergyStats(
        scope=scope,
        method=one_method(d.method for d in devices),
        sample_interval_s=sample_interval_s,
        window_start=start,
        window_s=window_s,
        covered_s=min(covered) if covered else None,
        energy_j=total,
        power_w_mean=ratio(total, window_s),
        idle_power_w=idle_w,
        idle_window_s=idle_window_s if idle_w is not None else None,
        idle_unavailable_reason=None if idle_w is not None else idle_unavailable_reason,
        energy_above_idle_j=None if total is None or idle_w is None else total - idle_w * window_s,
        devices=list(devices),
        unavailable_reason=None if total is not None else (
            "a device gave no figure (see devices)" if devices else "no device measured"),
        notes=notes,
    )


def hosts_energy(hosts: Sequence[tuple[str, EnergyStats | None]]) -> EnergyStats:
    """Every serving host's energy as one (devices ``<host>: <device>``, sums); no total when a host has none."""
    devices = [d.model_copy(update={"device": f"{host}: {d.device}"}) for host, e in hosts if e for d in e.devices]
    missing = [f"{host}: {e.unavailable_reason if e else 'no energy figure'}" for host, e in hosts
               if e is None or e.energy_j is None]  # fmt: skip
    known = [e for _, e in hosts if e is not None]
    first = known[0] if known else EnergyStats()
    total = None if missing else sum(e.energy_j or 0.0 for e in known)
    idle = [e.idle_power_w for e in known]
    idle_w = sum(v or 0.0 for v in idle) if known and not missing and None not in idle else None
    window_s = first.window_s
    return EnergyStats(
        scope=f"{len(hosts)} hosts: " + "; ".join(sorted({e.scope for e in known if e.scope})),
        method=one_method(e.method for e in known),
        **first.model_dump(include={"sample_interval_s", "window_start", "window_s"}),
        covered_s=min((e.covered_s for e in known if e.covered_s is not None), default=None),
        energy_j=total,
        power_w_mean=ratio(total, window_s),
        idle_power_w=idle_w,
        idle_window_s=first.idle_window_s if idle_w is not None else None,
        idle_unavailable_reason=None if idle_w is not None else "; ".join(
            f"{h}: {e.idle_unavailable_reason}" for h, e in hosts if e and e.idle_unavailable_reason) or None,
        energy_above_idle_j=None if total is None or idle_w is None or window_s is None else total - idle_w * window_s,
        devices=devices,
        unavailable_reason="; ".join(missing) or None,
        notes=[f"{host}: {note}" for host, e in hosts if e for note in e.notes],
    )


def replica_energy(
    energy: EnergyStats, groups: Sequence[tuple[str, Sequence[int]]], output_tokens: dict[str, int | None]
) -> list[ReplicaEnergy]:
    """Per replica ``(name, NVML indices)``: its GPUs' energy, its output tokens, and their ratio."""
    by_index = {d.gpu_index: d.energy_j for d in energy.devices if d.gpu_index is not None}
    out = []
    for name, indices in groups:
        values = [by_index.get(i) for i in indices]
        joules = None if not values or None in values else sum(v or 0.0 for v in values)
        tokens = output_tokens.get(name)
        out.append(
            ReplicaEnergy(replica=name, gpu_indices=list(indices), energy_j=joules, output_tokens=tokens,
                          energy_j_per_output_token=ratio(joules, tokens))
        )  # fmt: skip
    return out
