"""The energy and cost rows of the Markdown and HTML pages (docs/energy.md defines the figures)."""

from __future__ import annotations

from core.energy import EnergyStats
from core.report_schema import Report
from core.series_stats import SERIES_METRICS
from core.units import quantity as _n
from core.units import usd
from sidecar.render.cells import Row

METHODS = {
    "nvml_energy_counter": "NVML total-energy counter",
    "nvml_power_samples": "NVML power samples integrated",
    "rapl_energy_counter": "RAPL energy counter",
    "amd_energy_counter": "amd_energy counter",
    "mixed": "devices measured differently, see below",
}
CHANGED = ("energy_j_per_output_token", "output_tokens_per_j", "cost_usd_per_1m_output_tokens",
           "cost_usd_per_1m_total_tokens", "energy_cost_usd_per_1m_output_tokens")  # fmt: skip


def how_measured(energy: EnergyStats) -> str:
    """``NVML total-energy counter, GPUs of the engine (NVML), sampled every 0.5 s``."""
    method = f"{METHODS.get(energy.method, energy.method)}; " if energy.method else ""
    every = f", sampled every {energy.sample_interval_s:g} s" if energy.sample_interval_s else ""
    return f"{method}{energy.scope or 'nothing measured'}{every}"


def energy_headline_rows(report: Report) -> list[Row]:
    """Energy (or why not), J per output token and request, idle power, and the costs when priced."""
    m, energy = report.metrics, report.resources.energy
    rows: list[Row] = []
    if energy is not None and m.energy_j is None:
        rows.append(("Energy", f"not available: {energy.unavailable_reason}"))
    elif energy is not None:
        rows += [
            ("Energy", f"{_n(m.energy_j, 'J')} over {_n(energy.window_s, 's')}, mean {_n(m.power_w_mean, 'W')} "
                       f"({how_measured(energy)})"),
            ("Energy per output token / per request",
             f"{_n(m.energy_j_per_output_token, 'J')} / {_n(m.energy_j_per_request, 'J')} "
             f"({_n(m.output_tokens_per_j, 'output tokens per J')})"),
            ("Idle power before the run", idle_text(energy)),
        ]  # fmt: skip
    basis = report.cost
    if basis is not None and basis.price_usd_per_hour is not None:
        price = f"{basis.price_usd_per_hour:g} USD/h per {basis.price_per}"
        if basis.hourly_usd is None:
            rows.append(("Cost per 1M output / total tokens", f"n/a ({basis.unavailable_reason})"))
        else:
            rows.append(("Cost per 1M output / total tokens",
                         f"{usd(m.cost_usd_per_1m_output_tokens)} / {usd(m.cost_usd_per_1m_total_tokens)} ({price} x "
                         f"{basis.units} = {basis.hourly_usd:g} USD/h)"))  # fmt: skip
    if basis is not None and basis.energy_price_usd_per_kwh is not None:
        rows.append(("Energy cost per 1M output / total tokens",
                     f"{usd(m.energy_cost_usd_per_1m_output_tokens)} / {usd(m.energy_cost_usd_per_1m_total_tokens)} "
                     f"(at {basis.energy_price_usd_per_kwh:g} USD/kWh)" if m.energy_j is not None else
                     "n/a (no energy measured)"))  # fmt: skip
    return rows


def idle_text(energy: EnergyStats) -> str:
    """``62.1 W over 10 s (the run added 5120 J above it)`` or why there is no idle figure."""
    if energy.idle_power_w is None:
        return f"n/a ({energy.idle_unavailable_reason})" if energy.idle_unavailable_reason else "n/a"
    added = f"; the run added {_n(energy.energy_above_idle_j, 'J')} above it" if energy.energy_above_idle_j else ""
    return f"{_n(energy.idle_power_w, 'W')} over the {_n(energy.idle_window_s, 's')} before the run{added}"


def energy_rows(energy: EnergyStats) -> list[Row]:
    """Per device (GPU or host zone; ``host: device`` with peers), per local replica, then notes."""
    rows: list[Row] = [("Measured", how_measured(energy))]
    for d in energy.devices:
        if d.energy_j is None:
            rows.append((d.device, f"n/a ({d.unavailable_reason})"))
            continue
        method = METHODS.get(d.method or "", d.method or "?")
        rows.append((d.device, f"{_n(d.energy_j, 'J')}, mean {_n(d.power_w_mean, 'W')}, idle "
                               f"{_n(d.idle_power_w, 'W')} ({method}, {d.samples} samples over "
                               f"{_n(d.covered_s, 's')})"))  # fmt: skip
    for r in energy.replicas:
        gpus = ", ".join(map(str, r.gpu_indices))
        rows.append((f"Replica {r.replica} (GPU {gpus})", f"{_n(r.energy_j, 'J')}, {r.output_tokens or 'n/a'} "
                     f"output tokens, {_n(r.energy_j_per_output_token, 'J/output token')}"))  # fmt: skip
    rows += [("Note", note) for note in energy.notes]
    return rows


def energy_sections(report: Report) -> list[tuple[str, list[Row]]]:
    """``(title, rows)`` of the run's energy and of each host's (PEER_SIDECARS); empty where nothing was measured."""
    energy = report.resources.energy
    if energy is None or (energy.energy_j is None and not energy.devices):
        return []
    return [("Energy", energy_rows(energy))] + [
        (f"Energy of host {h.host}", energy_rows(h.energy)) for h in report.resources.hosts if h.energy is not None
    ]


def energy_changes(report: Report) -> list[str]:
    """``vs_previous: energy / output token +3.1%, cost / 1M output tokens -2.0%`` per comparison that has them."""
    lines = []
    for name, c in report.comparison.items():
        changes = c.points[0].changes if c.points else {}
        parts = [f"{SERIES_METRICS[m][0]} {change.change_pct:+.1f}%" for m in CHANGED
                 if (change := changes.get(m)) is not None and change.change_pct is not None]  # fmt: skip
        if parts:
            lines.append(f"{name}: {', '.join(parts)}")
    return lines
