"""The terminal's ``[ENERGY]`` and ``[COST]`` lines after a run, and energy and cost in its ``[COMPARE]`` lines."""

from __future__ import annotations

from core.cost import CostBasis
from core.energy import EnergyStats
from core.report_schema import Resources
from loadgen.terminal.summary import compare_lines, format_summary
from tests.unit.sidecar.test_sidecar_store import report, single_run


def test_a_measured_and_priced_run_prints_energy_and_cost() -> None:
    """Joules, J/output token, the idle power apart, how it was measured; USD per million tokens with the price."""
    base = report()
    energy = EnergyStats(energy_j=5000.0, window_s=10.0, method="nvml_energy_counter", sample_interval_s=0.5,
                         power_w_mean=500.0, idle_power_w=90.0)  # fmt: skip
    metrics = base.metrics.model_copy(update={
        "energy_j": 5000.0, "power_w_mean": 500.0, "idle_power_w": 90.0, "energy_j_per_output_token": 5.0,
        "energy_j_per_request": 500.0, "output_tokens_per_j": 0.2, "cost_usd_per_1m_output_tokens": 20.0,
        "cost_usd_per_1m_total_tokens": 13.333, "energy_cost_usd_per_1m_output_tokens": 0.5,
        "energy_cost_usd_per_1m_total_tokens": 0.333,
    })  # fmt: skip
    basis = CostBasis(price_usd_per_hour=3.6, price_per="gpu", units=2, hourly_usd=7.2, energy_price_usd_per_kwh=0.36)
    run = base.model_copy(update={"metrics": metrics, "resources": Resources(energy=energy), "cost": basis})
    lines = format_summary(run, "reports/x.json")
    assert ("[ENERGY] 5,000 J over 10 s (mean 500 W; idle 90 W before the run): 5 J/output token, 500 J/request, "
            "0.2 output tokens/J (nvml_energy_counter, every 0.5 s)") in lines
    assert "[COST] $20.00/1M output tokens, $13.33/1M total tokens (3.6 USD/h per gpu x 2)" in lines
    assert "[COST] energy $0.50/1M output tokens, $0.33/1M total tokens at 0.36 USD/kWh" in lines


def test_an_unmeasured_run_says_why_and_an_unpriced_one_prints_no_cost() -> None:
    """No energy: the reason, once (not again as a [WARN] gap); no price: no [COST] line; a report from before energy:
    no [ENERGY] line either."""
    unmeasured = report().model_copy(update={"resources": Resources(energy=EnergyStats(unavailable_reason="no RAPL")),
                                             "gaps": ["energy not available: no RAPL", "other gap"]})  # fmt: skip
    lines = format_summary(unmeasured, "reports/x.json")
    assert "[ENERGY] n/a: no RAPL" in lines and not any(line.startswith("[COST]") for line in lines)
    assert sum("no RAPL" in line for line in lines) == 1 and "[WARN] other gap" in lines  # said once, by [ENERGY]
    assert not any(line.startswith(("[ENERGY]", "[COST]")) for line in format_summary(report(), "reports/x.json"))


def test_compare_lines_add_energy_and_cost_where_both_runs_have_them() -> None:
    """``[COMPARE] vs_previous: ..., +10% J/output token, -5.0% $/1M output tokens``."""
    changes: dict[str, float | None] = {"throughput_req_per_sec": 1.0, "energy_j_per_output_token": 10.0,
               "cost_usd_per_1m_output_tokens": -5.0}  # fmt: skip
    compared = report().model_copy(update={"comparison": {"vs_previous": single_run("r", changes)}})
    (line,) = compare_lines(compared)
    assert line.startswith("[COMPARE] vs_previous: +1.0% throughput, +10% J/output token, -5.0% $/1M output tokens")


def test_an_interrupted_runs_compare_lines_say_the_changes_are_not_like_for_like() -> None:
    """A Ctrl-C'd run compared with a whole one printed ``-56% p99 latency`` as if like for like: the line after it
    now names why the run is no reference; a whole run's lines carry no such note."""
    changes: dict[str, float | None] = {"throughput_req_per_sec": 15.0, "e2e_p99_ms": -56.0}
    compared = report().model_copy(update={"comparison": {"vs_previous": single_run("r", changes)}})
    assert len(compare_lines(compared)) == 1
    first, note = compare_lines(compared.model_copy(update={"interrupted": True}))
    assert first.startswith("[COMPARE] vs_previous: +15% throughput")
    assert note.startswith("[COMPARE] not like for like: ") and "was interrupted (Ctrl-C)" in note
