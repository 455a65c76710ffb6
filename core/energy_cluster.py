"""A cluster's energy (pure): every serving host's (PEER_SIDECARS) summed, and each local replica's GPUs over the
tokens it generated (docs/energy.md)."""

from __future__ import annotations

from collections.abc import Sequence

from core.energy import EnergyStats, ReplicaEnergy, ratio


def hosts_energy(hosts: Sequence[tuple[str, EnergyStats | None]]) -> EnergyStats:
    """Every serving host's energy as one (devices ``<host>: <device>``, sums); no total when a host has none."""
    devices = [d.model_copy(update={"device": f"{host}: {d.device}"}) for host, e in hosts if e for d in e.devices]
    missing = [f"{host}: {e.unavailable_reason if e else 'no energy figure'}" for host, e in hosts
               if e is None or e.energy_j is None]  # fmt: skip
    known = [e for _, e in hosts if e is not None]
    first = known[0] if known else None
    total = None if missing else sum(e.energy_j or 0.0 for e in known)
    idle = [e.idle_power_w for e in known]
    idle_w = sum(v or 0.0 for v in idle) if known and not missing and None not in idle else None
    window_s = first.window_s if first else None
    methods = sorted({e.method for e in known if e.method})
    return EnergyStats(
        scope=f"{len(hosts)} hosts: " + "; ".join(sorted({e.scope for e in known if e.scope})),
        method=methods[0] if len(methods) == 1 else "mixed" if methods else None,
        sample_interval_s=first.sample_interval_s if first else None,
        window_start=first.window_start if first else None,
        window_s=window_s,
        covered_s=min((e.covered_s for e in known if e.covered_s is not None), default=None),
        energy_j=total,
        power_w_mean=ratio(total, window_s),
        idle_power_w=idle_w,
        idle_window_s=first.idle_window_s if first and idle_w is not None else None,
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
