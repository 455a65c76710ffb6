"""Deterministic request streams: which prompt, how many output tokens, and (open loop) when to send.

Output lengths default to a log-normal with mean 120 and P95 280 tokens (the seed's figures): for
``X = exp(N(mu, sigma))``, ``mean = exp(mu + sigma^2/2)`` and ``P95 = exp(mu + 1.645 sigma)``, solved for the
smaller sigma. Arrivals follow vLLM's ``benchmarks/serve.py``: gamma-distributed gaps with shape ``burstiness``
and mean ``1/rate`` (burstiness 1 = Poisson process; < 1 burstier, > 1 more regular).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from loadtest.dataset import Prompt

Z95 = 1.6448536269514722  # standard normal 95th percentile


@dataclass(frozen=True)
class WorkItem:
    """One request to send: the prompt and its ``max_tokens``."""

    prompt: Prompt
    max_tokens: int


def lognormal_params(mean: float, p95: float) -> tuple[float, float]:
    """``(mu, sigma)`` of the log-normal with the given mean and 95th percentile.

    Raises:
        ValueError: ``p95 <= mean`` or either is not positive (no log-normal fits).
    """
    if mean <= 0 or p95 <= mean:
        raise ValueError(f"output length needs 0 < mean < p95 (got mean={mean}, p95={p95})")
    # ln(p95) - ln(mean) = Z95*sigma - sigma^2/2  ->  sigma^2 - 2*Z95*sigma + 2*(ln p95 - ln mean) = 0
    gap = math.log(p95) - math.log(mean)
    disc = Z95**2 - 2 * gap
    if disc < 0:
        raise ValueError(f"no log-normal has mean {mean} and p95 {p95}: p95 is too far above the mean")
    sigma = Z95 - math.sqrt(disc)
    return math.log(mean) - sigma**2 / 2, sigma


class WorkloadSampler:
    """Endless, seeded sequence of :class:`WorkItem` s.

    Args:
        prompts: the dataset.
        seed: makes the sequence reproducible (same seed, same prompts and lengths in the same order).
        fixed_max_tokens: every request asks for this many tokens; else lengths are sampled.
        mean_tokens, p95_tokens: the log-normal's shape; ``cap_tokens`` bounds each draw.
        mix: bucket weights (``{"short": .3, ...}``); None draws prompts uniformly.
    """

    def __init__(
        self,
        prompts: list[Prompt],
        seed: int,
        *,
        fixed_max_tokens: int | None = None,
        mean_tokens: float = 120.0,
        p95_tokens: float = 280.0,
        cap_tokens: int = 1024,
        mix: dict[str, float] | None = None,
    ) -> None:
        if not prompts:
            raise ValueError("no prompts to sample from")
        self._rng = np.random.default_rng(seed)
        self._fixed = fixed_max_tokens
        self._cap = cap_tokens
        self._mu, self._sigma = (0.0, 0.0) if fixed_max_tokens else lognormal_params(mean_tokens, p95_tokens)
        groups: dict[str, list[Prompt]] = {}
        for prompt in prompts:
            groups.setdefault(prompt.bucket, []).append(prompt)
        if mix:
            missing = [b for b, w in mix.items() if w > 0 and b not in groups]
            if missing:
                raise ValueError(f"INPUT_MIX asks for bucket(s) {missing} but the dataset has none of that length")
            self._buckets = [b for b in mix if mix[b] > 0]
            weights = np.asarray([mix[b] for b in self._buckets], dtype=float)
            self._weights: np.ndarray | None = weights / weights.sum()
        else:
            self._buckets, self._weights = ["all"], None
            groups = {"all": prompts}
        self._groups = groups

    def max_tokens(self) -> int:
        """Next output length, tokens (≥ 1)."""
        if self._fixed:
            return self._fixed
        draw = float(self._rng.lognormal(self._mu, self._sigma))
        return int(min(self._cap, max(1, round(draw))))

    def next(self) -> WorkItem:
        """Next request."""
        bucket = self._buckets[int(self._rng.choice(len(self._buckets), p=self._weights))]
        group = self._groups[bucket]
        prompt = group[int(self._rng.integers(len(group)))]
        return WorkItem(prompt, self.max_tokens())

    def __iter__(self) -> Iterator[WorkItem]:
        while True:
            yield self.next()


def arrival_gaps_s(rate_per_s: float, burstiness: float, seed: int) -> Iterator[float]:
    """Endless gaps between arrivals, seconds: gamma(shape=burstiness, scale=1/(rate*burstiness)).

    Raises:
        ValueError: ``rate_per_s <= 0`` or ``burstiness <= 0``.
    """
    if rate_per_s <= 0:
        raise ValueError(f"RATE must be > 0 requests/s (got {rate_per_s}); unset RATE for a closed-loop run")
    if burstiness <= 0:
        raise ValueError(f"BURSTINESS must be > 0 (got {burstiness}); 1 is a Poisson process")
    rng = np.random.default_rng(seed)
    scale = 1.0 / (rate_per_s * burstiness)
    while True:
        yield float(rng.gamma(burstiness, scale))
