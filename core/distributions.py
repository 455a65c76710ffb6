"""Distributions of the synthetic workload (pure): output lengths and arrival gaps.

Output lengths: log-normal with ``mean = exp(mu + sigma^2/2)`` and ``P95 = exp(mu + 1.645 sigma)``, solved for the
smaller sigma. Arrivals (vLLM's ``benchmarks/serve.py``): gamma gaps, shape ``burstiness``, mean ``1/rate``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

Z95 = 1.6448536269514722  # standard normal 95th percentile


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
    """Endless gaps between arrivals, seconds: gamma(shape=burstiness, scale=1/(rate*burstiness)).

    Raises:
        ValueError: ``rate_per_s`` or ``burstiness`` not finite and > 0.
    """
    if not math.isfinite(rate_per_s) or rate_per_s <= 0:
        raise ValueError(f"RATE must be a finite number > 0 requests/s (got {rate_per_s}); unset it for a closed loop")
    if not math.isfinite(burstiness) or burstiness <= 0:
        raise ValueError(f"BURSTINESS must be a finite number > 0 (got {burstiness}); 1 is a Poisson process")
    rng = np.random.default_rng(seed)
    scale = 1.0 / (rate_per_s * burstiness)
    while True:
        yield float(rng.gamma(burstiness, scale))


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
