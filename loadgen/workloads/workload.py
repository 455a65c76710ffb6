"""Deterministic request streams: which prompt and how many output tokens (distributions: :mod:`core.distributions`)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from core.distributions import lognormal_params
from loadgen.workloads.dataset import Prompt


class AnswerSink(Protocol):
    """Takes a turn's answer back (:class:`loadgen.workloads.sessions.Session`)."""

    def answered(self, item: WorkItem, ok: bool, answer: str) -> None:
        """``answer`` is the text of ``item``'s reply (empty when ``ok`` is False)."""


@dataclass(frozen=True)
class WorkItem:
    """One request: the prompt, ``max_tokens`` and, in a multi-turn session, its conversation, id and turn."""

    prompt: Prompt
    max_tokens: int
    conversation: AnswerSink | None = None
    session_id: str | None = None
    turn: int | None = None
    think_time_s: float | None = None  # a later turn: the user's pause after the previous answer, s


class WorkloadSampler:
    """Endless sequence of :class:`WorkItem` s, reproducible by ``seed``: ``fixed_max_tokens`` each, else log-normal
    lengths (``mean_tokens``, ``p95_tokens``, at most ``cap_tokens``); prompts by bucket weights ``mix`` (None:
    uniform), or ``sequential``: one seeded order, each prompt once per cycle (``mix`` ignored).

    Raises:
        ValueError: no prompts, or ``mix`` asks for a bucket the dataset lacks.
    """

    def __init__(self, prompts: list[Prompt], seed: int, *, fixed_max_tokens: int | None = None,
                 mean_tokens: float = 120.0, p95_tokens: float = 280.0, cap_tokens: int = 1024,
                 mix: dict[str, float] | None = None, sequential: bool = False) -> None:
        if not prompts:
            raise ValueError("no prompts to sample from")
        self._rng = np.random.default_rng(seed)
        # sequential: every prompt once, in a seeded order, before any repeats (DATASET=random)
        self._order = [int(i) for i in self._rng.permutation(len(prompts))] if sequential else None
        self._position = 0
        self._prompts = prompts
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
        if self._order is not None:
            prompt = self._prompts[self._order[self._position % len(self._order)]]
            self._position += 1
            return WorkItem(prompt, self.max_tokens())
        bucket = self._buckets[int(self._rng.choice(len(self._buckets), p=self._weights))]
        group = self._groups[bucket]
        prompt = group[int(self._rng.integers(len(group)))]
        return WorkItem(prompt, self.max_tokens())

    def fork(self, seed: int | list[int]) -> WorkloadSampler:
        """The same workload (prompts, lengths, mix) drawn from a generator of its own seeded with ``seed`` (a
        conversation's own follow-ups and lengths, which must not shift the run's request sequence)."""
        twin = copy.copy(self)
        twin._rng = np.random.default_rng(seed)
        twin._order = [int(i) for i in twin._rng.permutation(len(self._prompts))] if self._order is not None else None
        twin._position = 0
        return twin
