"""A conversation user's think time (THINK_TIME): ``2s``, ``exponential:2s``, ``lognormal:2s[:sigma]`` (default
sigma 1; ``mu = ln(mean) - sigma^2/2``), ``0``: none (pure parsing and seeded draws).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from core.parsing import parse_duration_s

ThinkDistribution = Literal["fixed", "exponential", "lognormal"]
DEFAULT_SIGMA = 1.0
_EXAMPLE = "use e.g. THINK_TIME=2s, exponential:2s, lognormal:2s or lognormal:2s:0.5"


class ThinkTime(BaseModel):
    """The pause before each later turn of a conversation: its distribution, mean (s) and, for ``lognormal``, the
    sigma of the underlying normal."""

    distribution: ThinkDistribution = "fixed"
    mean_s: float = Field(ge=0)
    sigma: float | None = Field(default=None, description="lognormal: sigma of the underlying normal.")

    @property
    def text(self) -> str:
        """The THINK_TIME text that gives this (``exponential:2s``)."""
        head = "" if self.distribution == "fixed" else f"{self.distribution}:"
        tail = f":{self.sigma:g}" if self.sigma is not None and self.sigma != DEFAULT_SIGMA else ""
        return f"{head}{self.mean_s:g}s{tail}"


def parse_think_time(text: str) -> ThinkTime:
    """Parse THINK_TIME text (module docstring).

    Raises:
        ValueError: an unknown distribution, a bad mean or sigma, or a sigma where none applies.
    """
    parts = [p.strip() for p in text.strip().split(":")]
    distribution = "fixed"
    if parts and parts[0].lower() in ("fixed", "exponential", "lognormal"):
        distribution = parts.pop(0).lower()
    if not parts or len(parts) > (2 if distribution == "lognormal" else 1):
        raise ValueError(f"THINK_TIME={text!r} does not parse: {_EXAMPLE}")
    mean_text = parts[0]
    try:
        mean_s = 0.0 if _is_zero(mean_text) else parse_duration_s(mean_text)
    except ValueError:
        raise ValueError(f"THINK_TIME={text!r}: {mean_text!r} is not a mean pause; {_EXAMPLE}") from None
    sigma = None
    if distribution == "lognormal":
        sigma = DEFAULT_SIGMA
        if len(parts) == 2:
            try:
                sigma = float(parts[1])
            except ValueError:
                sigma = math.nan
            if not math.isfinite(sigma) or sigma <= 0:
                raise ValueError(f"THINK_TIME={text!r}: the lognormal's sigma must be a finite number > 0; {_EXAMPLE}")
    return ThinkTime(distribution=distribution, mean_s=mean_s, sigma=sigma)  # type: ignore[arg-type]


def _is_zero(text: str) -> bool:
    try:
        return float(text.rstrip("ms").strip() or "nan") == 0.0
    except ValueError:
        return False


def think_sampler(think: ThinkTime | None, seed: int | list[int]) -> Callable[[], float]:
    """Draws of ``think`` in seconds (always 0 without one), from its own generator seeded with ``seed``."""
    if think is None or think.mean_s == 0:
        return lambda: 0.0
    mean = think.mean_s
    if think.distribution == "fixed":
        return lambda: mean
    rng = np.random.default_rng(seed)
    if think.distribution == "exponential":
        return lambda: float(rng.exponential(mean))
    sigma = think.sigma or DEFAULT_SIGMA
    mu = math.log(mean) - sigma**2 / 2
    return lambda: float(rng.lognormal(mu, sigma))
