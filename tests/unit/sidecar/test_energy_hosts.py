"""A cluster run's energy: each host's (PEER_SIDECARS, asked over the run's window) summed, each local replica's GPUs
over the tokens it generated, and the price of every host's GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.energy import DeviceEnergy, EnergyStats, energy_stats
from core.report_schema import GpuStats, HostResources, Resources
from core.serverview_cluster import ClusterView, ReplicaView
from sidecar.reports.builder import replica_groups, run_cost, run_energy
from tests.unit.sidecar.test_energy_sampling import T0, request, run_rows
from tests.unit.sidecar.test_sidecar_app import make_settings


def gpus(joules: list[float]) -> EnergyStats:
    devices = [DeviceEnergy(device=f"GPU {i}", gpu_index=i, energy_j=j, covered_s=10.0, idle_power_w=10.0,
                            method="nvml_energy_counter") for i, j in enumerate(joules)]  # fmt: skip
    return energy_stats(devices, (T0 + 1010.0, T0 + 1020.0), "GPUs of the engine (NVML)")


def test_local_replicas_split_the_gpus_as_the_launcher_does(tmp_path: Path) -> None:
    """REPLICAS=2 over four GPUs: vllm gets 0,1 and vllm-1 gets 2,3; one replica, or too few GPUs: no groups."""
    settings = make_settings(tmp_path, replicas=2)
    assert replica_groups(settings, [0, 1, 2, 3]) == [("vllm", [0, 1]), ("vllm-1", [2, 3])]
    assert replica_groups(settings, [0]) == [] and replica_groups(make_settings(tmp_path), [0, 1]) == []


def test_cluster_energy_sums_hosts_and_splits_replicas() -> None:
    """This host (GPUs 0-3: 100..400 J) and a peer (500 J) sum to 1500 J over the run's window; the peer is asked
    with that window and the end of the idle span; replica vllm (GPUs 0,1) used 300 J for 600 tokens."""
    asked: list[tuple[float, float, float]] = []

    def peers(start: float, end: float, idle_end: float) -> list[HostResources]:
        asked.append((start, end, idle_end))
        return [HostResources(host="gpu2", url="http://gpu2:8200", energy=gpus([500.0]))]

    body = request()
    body = body.model_copy(update={"cluster": ClusterView(replicas=[
        ReplicaView(name="vllm", url="u", state="up", generation_tokens=600),
        ReplicaView(name="vllm-1", url="u", state="up", generation_tokens=400)])})  # fmt: skip
    resources = Resources(hosts=[HostResources(host="gpu1"), HostResources(host="gpu2", url="http://gpu2:8200")])
    out = run_energy(body, run_rows(), resources, lambda s, e, i: gpus([100.0, 200.0, 300.0, 400.0]), peers,
                     [("vllm", [0, 1]), ("vllm-1", [2, 3])])  # fmt: skip
    assert asked == [(T0 + 1010.0, T0 + 1020.0, T0 + 1008.0)]
    assert out.energy is not None and out.energy.energy_j == pytest.approx(1500.0)
    assert [h.energy.energy_j for h in out.hosts if h.energy] == [pytest.approx(1000.0), pytest.approx(500.0)]
    assert [(r.replica, r.energy_j, r.energy_j_per_output_token) for r in out.energy.replicas] == [
        ("vllm", 300.0, 0.5), ("vllm-1", 700.0, 1.75)]


def test_a_per_gpu_price_counts_every_hosts_gpus_and_refuses_an_unreported_host() -> None:
    """2/gpu over this host's 2 GPUs and a peer's 1 is 6 USD/h; a peer that did not answer leaves no cost, naming it;
    12/host over two hosts is 24 USD/h."""
    two, one = [GpuStats(index=0), GpuStats(index=1)], [GpuStats(index=0)]
    hosts = [HostResources(host="a", gpus=two), HostResources(host="b", url="http://b", gpus=one)]
    config = request("2/gpu").config
    assert run_cost(config, Resources(hosts=hosts)).hourly_usd == 6.0  # type: ignore[union-attr]
    down = [hosts[0], HostResources(host="b", url="http://b", unavailable_reason="refused")]
    basis = run_cost(config, Resources(hosts=down))
    assert basis is not None and basis.hourly_usd is None and "host b not reported" in (basis.unavailable_reason or "")
    assert run_cost(request("12/host").config, Resources(hosts=down)).hourly_usd == 24.0  # type: ignore[union-attr]
