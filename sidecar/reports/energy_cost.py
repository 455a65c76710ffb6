"""A run's energy (over its measured window, every host summed, per local replica) and cost (docs/energy.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from core.api import BuildReportRequest
from core.cost import CostBasis, cost_basis, parse_price
from core.energy import EnergyStats, first_send, hosts_energy, measured_bounds, replica_energy
from core.records import RequestRecord
from core.replicas import replicas, split_devices
from core.report_schema import BenchmarkConfig, HostResources, Resources
from core.serverview_cluster import ClusterView
from core.settings import Settings

EnergyOver = Callable[[float, float, float], EnergyStats]
"""``(start, end, idle_end) -> EnergyStats`` of this host (the sampler's)."""
PeersOver = Callable[[float, float, float], list[HostResources]]
"""``(start, end, idle_end) -> each peer's HostResources`` (PEER_SIDECARS)."""


def run_window(request: BuildReportRequest, records: Sequence[RequestRecord]) -> tuple[float, float, float]:
    """``(start, end, idle_end)``: the measured rows' first send and last end, and the run's first send."""
    start, end = measured_bounds(records) or (request.window_start, request.window_end)
    return start, end, first_send(records) or min(start, request.window_start)


def replica_groups(settings: Settings, gpu_indices: Sequence[int]) -> list[tuple[str, list[int]]]:
    """Each local replica's NVML GPUs, split as the launcher splits GPU_DEVICES; empty unless several."""
    try:
        local = [r for r in replicas(settings) if r.local]
    except ValueError:  # ENGINE_URLS does not parse: the stack would not have started either
        return []
    if len(local) < 2 or len(gpu_indices) < len(local):
        return []
    groups = split_devices([str(i) for i in gpu_indices], len(local))
    return [(r.name, [int(i) for i in g.split(",")]) for r, g in zip(local, groups, strict=True)]


def run_energy(
    request: BuildReportRequest,
    records: Sequence[RequestRecord],
    resources: Resources,
    own: EnergyOver,
    peers: PeersOver | None = None,
    groups: Sequence[tuple[str, Sequence[int]]] = (),
) -> Resources:
    """``resources`` with the run's energy over :func:`run_window`: per replica for ``groups``; with ``peers``, each
    host entry its own and the total their sum."""
    start, end, idle_end = run_window(request, records)
    mine = own(start, end, idle_end)
    if groups and request.cluster is not None:
        mine = mine.model_copy(update={"replicas": replica_energy(mine, groups, _tokens(request.cluster))})
    if peers is None or not resources.hosts:
        return resources.model_copy(update={"energy": mine})
    found = {p.url: p.energy for p in peers(start, end, idle_end)}
    hosts = [h.model_copy(update={"energy": mine if h.url is None else found.get(h.url, h.energy)})
             for h in resources.hosts]  # fmt: skip
    total = hosts_energy([(h.host, h.energy) for h in hosts]).model_copy(update={"replicas": mine.replicas})
    return resources.model_copy(update={"energy": total, "hosts": hosts})


def _tokens(cluster: ClusterView) -> dict[str, int | None]:
    return {r.name: r.generation_tokens for r in cluster.replicas}


def run_cost(config: BenchmarkConfig, resources: Resources) -> CostBasis | None:
    """PRICE_PER_HOUR and ENERGY_PRICE_PER_KWH applied to the GPUs (or hosts) that served; None when unset."""
    try:
        price = parse_price(config.price_per_hour) if config.price_per_hour else None
    except ValueError as exc:  # a body not written by the benchmark (which checks the knob before any load)
        return CostBasis(energy_price_usd_per_kwh=config.energy_price_per_kwh, unavailable_reason=str(exc))
    if resources.hosts:
        gpus = sum(len(h.gpus) for h in resources.hosts)
        unread = [h.host for h in resources.hosts if h.unavailable_reason]
        basis = cost_basis(price, config.energy_price_per_kwh, 0 if unread else gpus, len(resources.hosts),
                           f"host {', '.join(unread)} not reported" if unread else None)  # fmt: skip
    else:
        basis = cost_basis(price, config.energy_price_per_kwh, len(resources.gpus), 1, resources.gpu_unavailable_reason)
    return basis
