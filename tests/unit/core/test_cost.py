"""Cost maths (core/cost.py) and its knobs: PRICE_PER_HOUR per GPU or host, ENERGY_PRICE_PER_KWH; no price, no cost."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.cost import HardwarePrice, cost_basis, cost_per_million_tokens, parse_price, report_figures
from core.energy import EnergyStats
from core.records import RequestRecord
from core.settings import Settings
from core.stats import run_metrics


@pytest.mark.parametrize(
    ("text", "amount", "per"),
    [("2.5/gpu", 2.5, "gpu"), ("$2.50 / GPU", 2.5, "gpu"), ("12/host", 12.0, "host"), ("0.9 USD/gpus", 0.9, "gpu")],
)
def test_price_spellings(text: str, amount: float, per: str) -> None:
    """A price is US dollars per hour per GPU or per host, in a few spellings."""
    assert parse_price(text) == HardwarePrice(usd_per_hour=amount, per=per)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["2.5", "2.5/node", "cheap/gpu", ""])
def test_a_price_without_its_unit_is_refused_showing_both(text: str) -> None:
    """A bare number (GPU or host?) or another unit is an error naming both spellings."""
    with pytest.raises(ValueError, match=r"2\.5/gpu .* or 12/host"):
        parse_price(text)


def test_the_knob_normalises_and_refuses_as_the_parser_does() -> None:
    """PRICE_PER_HOUR reads as its normalised spelling; a bare number stops with the variable named."""
    assert Settings(_env_file=None, price_per_hour=" $3 / GPU ").price_per_hour == "3/gpu"  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="PRICE_PER_HOUR='3'"):
        Settings(_env_file=None, price_per_hour="3")  # type: ignore[call-arg]
    unset = Settings(_env_file=None)  # type: ignore[call-arg]
    assert unset.price_per_hour is None and unset.energy_price_per_kwh is None


def test_cost_per_million_tokens_is_exact() -> None:
    """3.6 USD/h for 100 s is 0.1 USD; over 50,000 tokens that is 2 USD per million."""
    assert cost_per_million_tokens(3.6, 100.0, 50_000) == pytest.approx(2.0)
    assert cost_per_million_tokens(None, 100.0, 50_000) is None and cost_per_million_tokens(3.6, 100.0, 0) is None


def test_basis_prices_gpus_or_hosts_and_says_why_not() -> None:
    """Per GPU: price x GPUs; per host: price x hosts; per GPU without GPUs: no cost and why; no price: None."""
    gpu = cost_basis(parse_price("2/gpu"), None, gpus=4, hosts=1)
    assert gpu is not None and (gpu.units, gpu.hourly_usd) == (4, 8.0)
    host = cost_basis(parse_price("10/host"), 0.2, gpus=0, hosts=2)
    assert host is not None and (host.units, host.hourly_usd, host.energy_price_usd_per_kwh) == (2, 20.0, 0.2)
    none = cost_basis(parse_price("2/gpu"), None, gpus=0, hosts=1, gpu_reason="NVML unavailable: no driver")
    assert none is not None and none.hourly_usd is None and "NVML unavailable" in (none.unavailable_reason or "")
    assert cost_basis(None, None, gpus=4, hosts=1) is None


def test_report_figures_unpriced_and_unmeasured_are_none_never_made_up() -> None:
    """Without a price and an energy figure every cost and energy figure is None; with them they are exact."""
    rows = [RequestRecord(request_id=f"r{i}", started_at=float(i), ok=True, e2e_ms=1000.0, output_tokens=100,
                          prompt_tokens=100) for i in range(10)]  # fmt: skip
    run = run_metrics(rows)  # 10 s window, 1000 output + 1000 prompt tokens
    assert set(report_figures(run, None, None).values()) == {None}
    basis = cost_basis(parse_price("36/host"), 0.36, gpus=0, hosts=1)
    figures = report_figures(run, EnergyStats(energy_j=500.0, power_w_mean=50.0), basis)
    assert figures["cost_usd_per_1m_output_tokens"] == pytest.approx(36 * 10 / 3600 / 1000 * 1e6)  # 100 USD
    assert figures["cost_usd_per_1m_total_tokens"] == pytest.approx(50.0)
    assert figures["energy_j_per_output_token"] == 0.5 and figures["energy_j_per_request"] == 50.0
    assert figures["energy_cost_usd_per_1m_output_tokens"] == pytest.approx(0.5 * 1e6 / 3.6e6 * 0.36)


def test_efficiency_figures_are_exact() -> None:
    """1000 J over 4000 output and 1000 prompt tokens of 10 requests: 0.25 J/token, 100 J/request, 4 tokens/J; at
    0.36 USD/kWh a million output tokens cost 0.25 x 10^6 / 3.6x10^6 x 0.36 = 0.025 USD."""
    rows = [RequestRecord(request_id=f"r{i}", started_at=float(i), ok=True, e2e_ms=1000.0, output_tokens=400,
                          prompt_tokens=100) for i in range(10)]  # fmt: skip
    run, basis = run_metrics(rows), cost_basis(None, 0.36, gpus=0, hosts=1)
    eff = report_figures(run, EnergyStats(energy_j=1_000.0), basis)
    assert eff["energy_j_per_output_token"] == 0.25 and eff["energy_j_per_request"] == 100.0
    assert eff["output_tokens_per_j"] == 4.0
    assert eff["energy_cost_usd_per_1m_output_tokens"] == pytest.approx(0.025)
    assert eff["energy_cost_usd_per_1m_total_tokens"] == pytest.approx(0.02)
    none = report_figures(run, None, basis)
    assert none["energy_j_per_output_token"] is None and none["energy_cost_usd_per_1m_output_tokens"] is None
