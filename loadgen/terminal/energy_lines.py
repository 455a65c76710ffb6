"""The terminal's energy and cost lines of a run (pure): ``[ENERGY]`` (joules, J per output token and per request,
the idle power apart, or why there is none) and ``[COST]`` (USD per million tokens, when priced); docs/energy.md."""

from __future__ import annotations

from core.report_schema import Report

COMPARE_LABELS = (("energy_j_per_output_token", "J/output token"),
                  ("cost_usd_per_1m_output_tokens", "$/1M output tokens"))
"""Changes a run's ``[COMPARE]`` line adds where both runs have them."""
WHERE_MEASURED = ("energy_j_per_output_token", "cost_usd_per_1m_output_tokens", "cost_usd_per_1m_total_tokens")
"""Series metrics a series' or ``make compare``'s ``[COMPARE]`` line adds where both sides have them."""


def _n(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f} {unit}" if abs(value) >= 100 else f"{value:.3g} {unit}"


def _usd(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.2f}" if value >= 0.01 else f"${value:.3g}"


def energy_lines(report: Report) -> list[str]:
    """``[ENERGY]`` and ``[COST]`` lines (none for a report from before energy was measured, or unpriced)."""
    m, energy, basis = report.metrics, report.resources.energy, report.cost
    lines = []
    if energy is not None and m.energy_j is None:
        lines.append(f"[ENERGY] n/a: {energy.unavailable_reason}")
    elif energy is not None:
        idle = f"idle {_n(m.idle_power_w, 'W')} before the run" if m.idle_power_w is not None else (
            f"idle n/a: {energy.idle_unavailable_reason}")
        lines.append(f"[ENERGY] {_n(m.energy_j, 'J')} over {_n(energy.window_s, 's')} (mean "
                     f"{_n(m.power_w_mean, 'W')}; {idle}): {_n(m.energy_j_per_output_token, 'J/output token')}, "
                     f"{_n(m.energy_j_per_request, 'J/request')}, {_n(m.output_tokens_per_j, 'output tokens/J')} "
                     f"({energy.method}, every {energy.sample_interval_s:g} s)")
    if basis is not None and basis.price_usd_per_hour is not None:
        if basis.hourly_usd is None:
            lines.append(f"[COST] n/a: {basis.unavailable_reason}")
        else:
            lines.append(f"[COST] {_usd(m.cost_usd_per_1m_output_tokens)}/1M output tokens, "
                         f"{_usd(m.cost_usd_per_1m_total_tokens)}/1M total tokens ({basis.price_usd_per_hour:g} USD/h "
                         f"per {basis.price_per} x {basis.units})")
    if basis is not None and basis.energy_price_usd_per_kwh is not None and m.energy_j is not None:
        lines.append(f"[COST] energy {_usd(m.energy_cost_usd_per_1m_output_tokens)}/1M output tokens, "
                     f"{_usd(m.energy_cost_usd_per_1m_total_tokens)}/1M total tokens at "
                     f"{basis.energy_price_usd_per_kwh:g} USD/kWh")
    return lines
