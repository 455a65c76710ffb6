"""Energy maths (core/energy.py): counters and power samples over a window, idle power, per-token figures, hosts and
replicas."""

from __future__ import annotations

import pytest

from core.energy import (
    DeviceEnergy,
    EnergyStats,
    counter_energy,
    device_energy,
    energy_stats,
    hosts_energy,
    power_energy,
    replica_energy,
    unwrap,
)


def test_counter_energy_is_the_increase_between_the_interpolated_bounds() -> None:
    """A counter read at 0 s and 10 s (0 -> 1000 J) gives 500 J over [2.5, 7.5]: each bound interpolated."""
    found = counter_energy([(100.0, 5_000.0), (110.0, 6_000.0)], 102.5, 107.5)
    assert found is not None and found.joules == pytest.approx(500.0) and found.covered_s == pytest.approx(5.0)
    assert found.mean_w == pytest.approx(100.0)


def test_rapl_wrap_around_is_unwrapped_with_its_range() -> None:
    """A reading below the one before is a wrap at max_energy_range: 250 -> 10 with a 262 J range is +22 J."""
    assert unwrap([(0.0, 200.0), (1.0, 250.0), (2.0, 10.0)], wrap_j=262.0) == [(0.0, 0.0), (1.0, 50.0), (2.0, 72.0)]
    found = counter_energy([(0.0, 200.0), (1.0, 250.0), (2.0, 10.0)], 0.0, 2.0, wrap_j=262.0)
    assert found is not None and found.joules == pytest.approx(72.0)


def test_a_counter_without_range_that_falls_restarted() -> None:
    """NVML's counter falling (a driver reload) counts its new reading as the energy since the restart."""
    assert unwrap([(0.0, 900.0), (1.0, 950.0), (2.0, 30.0)]) == [(0.0, 0.0), (1.0, 50.0), (2.0, 80.0)]


def test_power_samples_integrate_by_trapezoids_with_interpolated_edges() -> None:
    """100 W at 0 s, 300 W at 2 s, 300 W at 4 s: [1, 4] is 1 s from 200 to 300 W (250 J) plus 2 s at 300 W."""
    found = power_energy([(0.0, 100.0), (2.0, 300.0), (4.0, 300.0)], 1.0, 4.0)
    assert found is not None and found.joules == pytest.approx(250.0 + 600.0) and found.covered_s == 3.0


def test_no_sample_in_reach_is_no_figure() -> None:
    """Readings that do not reach into the window (or a single one) give no energy."""
    assert counter_energy([(0.0, 1.0), (1.0, 2.0)], 5.0, 6.0) is None
    assert power_energy([(5.5, 100.0)], 5.0, 6.0) is None


def test_a_device_uses_its_counter_else_its_power_and_measures_idle_the_same_way() -> None:
    """A counter device is measured by its counter; a power-only one by its samples; each has its idle mean power."""
    counter = [(0.0, 0.0), (10.0, 500.0), (20.0, 3_500.0)]  # 50 W idle, then 300 W
    with_counter = device_energy("GPU 0", (10.0, 20.0), counter, [(10.0, 999.0), (20.0, 999.0)], idle=(0.0, 10.0))
    assert with_counter.method == "nvml_energy_counter" and with_counter.energy_j == pytest.approx(3_000.0)
    assert with_counter.idle_power_w == pytest.approx(50.0) and with_counter.power_w_mean == pytest.approx(300.0)
    power_only = device_energy("GPU 1", (10.0, 20.0), [], [(0.0, 40.0), (10.0, 40.0), (20.0, 200.0)], (0.0, 10.0))
    assert power_only.method == "nvml_power_samples" and power_only.energy_j == pytest.approx(1_200.0)
    assert power_only.idle_power_w == pytest.approx(40.0)
    nothing = device_energy("GPU 2", (10.0, 20.0))
    assert nothing.energy_j is None and "not supported" in (nothing.unavailable_reason or "")


def test_a_window_partly_covered_is_extrapolated_at_its_mean_power_and_noted() -> None:
    """Samples covering 5 s of a 10 s window at 100 W give 1000 J for the window, with a note saying so."""
    device = device_energy("GPU 0", (0.0, 10.0), [(5.0, 0.0), (10.0, 500.0)])
    stats = energy_stats([device], (0.0, 10.0), "GPUs")
    assert stats.energy_j == pytest.approx(1_000.0) and stats.covered_s == pytest.approx(5.0)
    assert any("covered 5.0 s of the 10.0 s window" in n for n in stats.notes)


def test_the_total_needs_every_device_and_idle_is_shown_apart() -> None:
    """Two devices sum with their idle powers and the energy above idle; one without a figure leaves no total."""
    a = DeviceEnergy(device="a", energy_j=600.0, power_w_mean=60.0, covered_s=10.0, idle_power_w=20.0, method="x")
    b = DeviceEnergy(device="b", energy_j=400.0, power_w_mean=40.0, covered_s=10.0, idle_power_w=10.0, method="x")
    stats = energy_stats([a, b], (0.0, 10.0), "GPUs", 0.5, 10.0)
    assert (stats.energy_j, stats.power_w_mean, stats.idle_power_w) == (1_000.0, 100.0, 30.0)
    assert stats.energy_above_idle_j == pytest.approx(700.0) and stats.method == "x"
    broken = energy_stats([a, DeviceEnergy(device="b", unavailable_reason="gone")], (0.0, 10.0), "GPUs")
    assert broken.energy_j is None and broken.unavailable_reason and broken.notes == ["b: gone"]


def test_a_busy_engine_before_the_run_gives_no_idle_figure_but_the_reason() -> None:
    """The reason for a missing idle figure is kept, and no idle power is made up."""
    a = DeviceEnergy(device="a", energy_j=600.0, covered_s=10.0, method="x")
    stats = energy_stats([a], (0.0, 10.0), "GPUs", idle_unavailable_reason="vLLM was serving 3 request(s)")
    assert stats.idle_power_w is None and stats.idle_unavailable_reason == "vLLM was serving 3 request(s)"


def test_hosts_sum_and_a_host_without_energy_leaves_no_total() -> None:
    """Two hosts' energy adds up, device names carry the host; a host without a figure says which and why."""
    one = energy_stats([DeviceEnergy(device="GPU 0", energy_j=100.0, covered_s=1.0, idle_power_w=5.0, method="x")],
                       (0.0, 1.0), "GPUs")  # fmt: skip
    two = energy_stats([DeviceEnergy(device="GPU 0", energy_j=300.0, covered_s=1.0, idle_power_w=7.0, method="x")],
                       (0.0, 1.0), "GPUs")  # fmt: skip
    total = hosts_energy([("a", one), ("b", two)])
    assert total.energy_j == 400.0 and total.idle_power_w == 12.0 and total.scope == "2 hosts: GPUs"
    assert [d.device for d in total.devices] == ["a: GPU 0", "b: GPU 0"]
    partial = hosts_energy([("a", one), ("b", EnergyStats(unavailable_reason="no NVML"))])
    assert partial.energy_j is None and partial.unavailable_reason == "b: no NVML"


def test_replica_energy_is_its_gpus_over_its_tokens() -> None:
    """Replica vllm on GPUs 0,1 and vllm-1 on GPU 2: each its GPUs' joules over the tokens it generated."""
    stats = energy_stats([DeviceEnergy(device=f"GPU {i}", gpu_index=i, energy_j=100.0 * (i + 1), covered_s=1.0,
                                       method="x") for i in range(3)], (0.0, 1.0), "GPUs")  # fmt: skip
    out = replica_energy(stats, [("vllm", [0, 1]), ("vllm-1", [2])], {"vllm": 600, "vllm-1": None})
    assert [(r.replica, r.energy_j, r.energy_j_per_output_token) for r in out] == [
        ("vllm", 300.0, 0.5), ("vllm-1", 300.0, None)
    ]
