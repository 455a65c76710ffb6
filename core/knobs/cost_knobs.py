"""Settings fields of what serving costs: hardware per hour, electricity per kWh (docs/energy.md); a group of
:class:`core.settings.Settings`. Unset: no cost.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from core.cost import parse_price
from core.knobs import Knobs, from_text


class CostKnobs(Knobs):
    """The prices reports turn into USD per million tokens (the benchmark records them in each report's config)."""

    # normalised spelling (2.5/gpu); a bare number is refused (GPU or host?)
    price_per_hour: Annotated[str | None, from_text(lambda text: parse_price(text).text)] = None
    """The serving hardware's price, US dollars per hour of each GPU (2.5/gpu) or of each serving host (12/host);
    reports then give USD per million output and total tokens. Unset: no cost."""
    energy_price_per_kwh: float | None = Field(default=None, ge=0)
    """Electricity, US dollars per kWh; reports with an energy figure then give its cost per million tokens beside
    the hardware's."""
