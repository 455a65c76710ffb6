"""Distributions of the synthetic workload (pure): output lengths and arrival gaps.

Output lengths default to a log-normal with mean 120 and P95 280 tokens (the seed's figures): for
``X = exp(N(mu, sigma))``, ``mean = exp(mu + sigma^2/2)`` and ``P95 = exp(mu + 1.645 sigma)``, solved for the
smaller sigma. Arrivals follow vLLM's ``benchmarks/serve.py``: gamma-distributed gaps with shape ``burstiness``
and mean ``1/rate`` (burstiness 1 = Poisson process; < 1 burstier, > 1 more regular).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

Z95 = 1.6448536269514722  # standard normal 95th percentile


def lognormal_params(mean: float, p95: float) -> tuple[float, float]:
    """``(mu, sigma)`` of the log-normal with the given mean and 95th percentile (tokens).

    Raises:
        ValueError: not both finite and positive, ``p95 <= mean``, or p95 so far above the mean that no log-normal
            fits (the message names OUTPUT_LEN_MEAN and OUTPUT_LEN_P95).
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
