"""Distributions of the synthetic workload (pure parsing and seeded draws): output lengths, arrival gaps and a
conversation user's think time.

Output lengths: log-normal with ``mean = exp(mu + sigma^2/2)`` and ``P95 = exp(mu + 1.645 sigma)``, solved for the
smaller sigma. Arrivals (vLLM's ``benchmarks/serve.py``): gamma gaps, shape ``burstiness``, mean ``1/rate``. Think time
(THINK_TIME): ``2s``, ``exponential:2s``, ``lognormal:2s[:sigma]`` (default sigma 1; ``mu = ln(mean) - sigma^2/2``),
``0``: none.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from core.parsing import _finite, parse_duration_s

Z95 = 1.6448536269514722  # standard normal 95th percentile
ThinkDistribution = Literal["fixed", "exponential", "lognormal"]
DEFAULT_SIGMA = 1.0
_EXAMPLE = "use e.g. THINK_TIME=2s, exponential:2s, lognormal:2s or lognormal:2s:0.5"


def lognormal_params(mean: float, p95: float) -> tuple[float, float]:
    """``(mu, sigma)`` of the log-normal with the given mean and 95th percentile (tokens).

    Raises:
        ValueError: not both finite and positive, ``p95 <= mean``, or no log-normal fits.
    """
    if not (math.isfinite(mean) and math.isfinite(p95)) or mean <= 0 or p95 <= mean:
        raise ValueError(
            f"output lengths need finite 0 < OUTPUT_LEN_MEAN < OUTPUT_LEN_P95 (got mean={mean}, p95={p95})"
        )
    # ln(p95) - ln(mean) = Z95*sigma - sigma^2/2  ->  sigma^2 - 2*Z95*sigma + 2*(ln p95 - ln mean) = 0
    gap = math.log(p95) - math.log(mean)
    disc = Z95**2 - 2 * gap
    if disc < 0:
        limit = mean * math.exp(Z95**2 / 2)
        raise ValueError(
            f"no log-normal has mean {mean} and P95 {p95}: OUTPUT_LEN_P95 must be below {limit:.0f} for this mean"
        )
    sigma = Z95 - math.sqrt(disc)
    return math.log(mean) - sigma**2 / 2, sigma


def arrival_gaps_s(rate_per_s: float, burstiness: float, seed: int) -> Iterator[float]:
    """Endless gaps between arrivals, seconds: gamma(shape=burstiness, scale=1/(rate*burstiness)) (a ramp that stays at
    ``rate_per_s``).

    Raises:
        ValueError: ``rate_per_s`` or ``burstiness`` not finite and > 0.
    """
    if not math.isfinite(rate_per_s) or rate_per_s <= 0:
        raise ValueError(f"RATE must be a finite number > 0 requests/s (got {rate_per_s}); unset it for a closed loop")
    yield from ramp_arrival_gaps_s(rate_per_s, rate_per_s, burstiness, seed, requests=1)


def ramp_arrival_gaps_s(
    start_rps: float,
    end_rps: float,
    burstiness: float,
    seed: int,
    *,
    duration_s: float | None = None,
    requests: int | None = None,
) -> Iterator[float]:
    """Gaps of a linear rate ramp, s: gamma (shape ``burstiness``, mean 1/rate) with the rate from ``start_rps`` to
    ``end_rps`` over ``duration_s`` (by time) or ``requests`` (by index, as ``vllm bench serve --ramp-up-strategy
    linear``), then ``end_rps``.

    Raises:
        ValueError: a rate or ``burstiness`` not finite and > 0, or neither ``duration_s`` nor ``requests``.
    """
    for name, value in (("RATE", start_rps), ("RATE_END", end_rps)):
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a finite number > 0 requests/s (got {value})")
    if not math.isfinite(burstiness) or burstiness <= 0:
        raise ValueError(f"BURSTINESS must be a finite number > 0 (got {burstiness}); 1 is a Poisson process")
    if not duration_s and not requests:
        raise ValueError("a rate ramp needs DURATION or REQUESTS to know how long it lasts")
    rng = np.random.default_rng(seed)
    elapsed_s = 0.0
    index = 0
    while True:
        progress = elapsed_s / duration_s if duration_s else index / max((requests or 1) - 1, 1)
        rate = start_rps + (end_rps - start_rps) * min(1.0, progress)
        gap = float(rng.gamma(burstiness, 1.0 / (rate * burstiness)))
        elapsed_s += gap
        index += 1
        yield gap


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
        mean_s = 0.0 if _finite(mean_text.rstrip("ms").strip()) == 0.0 else parse_duration_s(mean_text)
    except ValueError:
        raise ValueError(f"THINK_TIME={text!r}: {mean_text!r} is not a mean pause; {_EXAMPLE}") from None
    sigma = None
    if distribution == "lognormal":
        sigma = DEFAULT_SIGMA if len(parts) == 1 else _finite(parts[1])
        if sigma is None or sigma <= 0:
            raise ValueError(f"THINK_TIME={text!r}: the lognormal's sigma must be a finite number > 0; {_EXAMPLE}")
    return ThinkTime(distribution=distribution, mean_s=mean_s, sigma=sigma)  # type: ignore[arg-type]


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
