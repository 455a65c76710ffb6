"""What serving costs per million tokens (pure; docs/energy.md). No price set: no cost.

- hardware cost per 1M tokens = price per hour x priced units (GPUs or hosts) x measured window / 3600 / tokens x 10^6
- energy cost per 1M tokens = J per token x 10^6 / 3.6x10^6 J/kWh x price per kWh
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from core.energy import EnergyStats, ratio
from core.stats import RunMetrics

PricedUnit = Literal["gpu", "host"]
J_PER_KWH = 3.6e6
_PRICE_RE = re.compile(r"\$?\s*(?P<amount>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(?:usd)?\s*/\s*(?P<unit>gpu|host)s?",
                       re.IGNORECASE)  # fmt: skip


class HardwarePrice(BaseModel):
    """PRICE_PER_HOUR parsed: US dollars per hour of each GPU or of each host."""

    usd_per_hour: float = Field(ge=0)
    per: PricedUnit

    @property
    def text(self) -> str:
        """``2.5/gpu``: the knob's own spelling."""
        return f"{self.usd_per_hour:g}/{self.per}"


def parse_price(text: str) -> HardwarePrice:
    """``2.5/gpu``, ``$2.50 / GPU``, ``12/host`` (USD per hour) as a :class:`HardwarePrice`.

    Raises:
        ValueError: no unit or no amount; the message shows both spellings.
    """
    found = _PRICE_RE.fullmatch(text.strip())
    if found is None:
        raise ValueError(
            f"PRICE_PER_HOUR={text!r}: give US dollars per hour and what it prices, e.g. 2.5/gpu (each GPU the "
            "engine uses) or 12/host (each serving host)"
        )
    return HardwarePrice(usd_per_hour=float(found["amount"]), per=found["unit"].lower())  # type: ignore[arg-type]


class CostBasis(BaseModel):
    """The prices a report's costs were computed with (``report.cost``): hardware per hour and per kWh, how many
    units were priced, and why a cost is missing."""

    price_usd_per_hour: float | None = Field(default=None, description="PRICE_PER_HOUR's amount, USD/h per unit.")
    price_per: PricedUnit | None = Field(default=None, description="What one price covers: a GPU or a host.")
    units: int | None = Field(default=None, description="GPUs or hosts priced (the engine's, over every host).")
    hourly_usd: float | None = Field(default=None, description="price_usd_per_hour x units, USD/h.")
    energy_price_usd_per_kwh: float | None = Field(default=None, description="ENERGY_PRICE_PER_KWH, USD/kWh.")
    unavailable_reason: str | None = Field(
        default=None, description="Why a price was given but no cost computed (no GPU to price, no energy figure)."
    )


def cost_basis(
    price: HardwarePrice | None, usd_per_kwh: float | None, gpus: int, hosts: int, gpu_reason: str | None = None
) -> CostBasis | None:
    """The hourly price for ``gpus`` GPUs on ``hosts`` hosts, or why none (None: no price set)."""
    if price is None and usd_per_kwh is None:
        return None
    if price is None:
        return CostBasis(energy_price_usd_per_kwh=usd_per_kwh)
    units = gpus if price.per == "gpu" else hosts
    basis = CostBasis(energy_price_usd_per_kwh=usd_per_kwh, price_usd_per_hour=price.usd_per_hour, price_per=price.per)
    if units <= 0:
        why = f"PRICE_PER_HOUR={price.text} prices GPUs and the engine's GPUs were not read"
        basis.unavailable_reason = f"{why} ({gpu_reason})" if gpu_reason else f"{why}: price the host (/host)"
        return basis
    return basis.model_copy(update={"units": units, "hourly_usd": price.usd_per_hour * units})


def cost_per_million_tokens(hourly_usd: float | None, duration_s: float, tokens: int) -> float | None:
    """USD per million ``tokens`` served in ``duration_s`` at ``hourly_usd``; None without price or tokens."""
    if hourly_usd is None or tokens <= 0 or duration_s <= 0:
        return None
    return hourly_usd * duration_s / 3600.0 / tokens * 1e6


def report_figures(run: RunMetrics, energy: EnergyStats | None, basis: CostBasis | None) -> dict[str, float | None]:
    """The flat energy and cost figures of a report's metrics (J per output token and per successful request, output
    tokens per J, energy and hardware cost per 1M tokens); None where not measured or priced."""
    joules = energy.energy_j if energy else None
    usd_per_kwh = basis.energy_price_usd_per_kwh if basis else None
    hourly = basis.hourly_usd if basis else None
    output, total = run.output_tokens_total, run.output_tokens_total + run.prompt_tokens_total

    def energy_cost(per_token_j: float | None) -> float | None:
        return None if per_token_j is None or usd_per_kwh is None else per_token_j * 1e6 / J_PER_KWH * usd_per_kwh

    return {
        "energy_j": joules,
        "power_w_mean": energy.power_w_mean if energy else None,
        "idle_power_w": energy.idle_power_w if energy else None,
        "energy_j_per_output_token": ratio(joules, output),
        "energy_j_per_request": ratio(joules, run.requests_ok),
        "output_tokens_per_j": ratio(float(output), joules) if joules else None,
        "energy_cost_usd_per_1m_output_tokens": energy_cost(ratio(joules, output)),
        "energy_cost_usd_per_1m_total_tokens": energy_cost(ratio(joules, total)),
        "cost_usd_per_1m_output_tokens": cost_per_million_tokens(hourly, run.duration_s, output),
        "cost_usd_per_1m_total_tokens": cost_per_million_tokens(hourly, run.duration_s, total),
    }
