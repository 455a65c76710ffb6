"""Deterministic request streams: which prompt and how many output tokens (distributions: :mod:`core.distributions`),
and multi-turn conversations (SESSION_TURNS > 1): turn k+1 leaves after turn k's answer and the think time
(THINK_TIME), carrying the whole history with the model's actual answers.

Later turns (SESSION_FOLLOWUPS, :func:`followups_of`) are either ``dataset``: a conversation's leading system messages
and *real* user turns (its recorded answers are not sent), dealt in one seeded order (:class:`ConversationDeck`), or
``drawn``: turn 1 a workload prompt, each later turn another prompt's last user message. A failed turn ends its
session; a session stays in the load process that started it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from core.distributions import lognormal_params
from loadgen.workloads.dataset import Prompt


@dataclass(frozen=True)
class WorkItem:
    """One request: the prompt, ``max_tokens`` and, in a multi-turn session, its conversation, id and turn."""

    prompt: Prompt
    max_tokens: int
    conversation: Session | None = None
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


Followups = Literal["dataset", "drawn"]
Message = dict[str, str]


def split_turns(prompt: Prompt) -> tuple[list[Message], list[str]]:
    """``(leading system messages, the user turns' texts)`` of a dataset entry (recorded answers dropped)."""
    system: list[Message] = []
    users: list[str] = []
    for message in prompt.messages:
        if message["role"] == "system" and not users:
            system.append(dict(message))
        elif message["role"] == "user":
            users.append(message["content"])
    return system, users


def multi_turn_share(prompts: Sequence[Prompt]) -> float:
    """The share of entries holding two or more user turns (0 without entries)."""
    return sum(len(split_turns(p)[1]) >= 2 for p in prompts) / len(prompts) if prompts else 0.0


def followups_of(prompts: Sequence[Prompt], session_turns: int, asked: str = "auto") -> Followups | None:
    """Where a run's later turns come from: None for SESSION_TURNS 1; ``asked`` when it names one; ``auto``:
    ``dataset`` when at least half the entries are multi-turn conversations, else ``drawn``."""
    if session_turns <= 1:
        return None
    if asked in ("dataset", "drawn"):
        return asked  # type: ignore[return-value]
    return "dataset" if multi_turn_share(prompts) >= 0.5 else "drawn"


class ConversationDeck:
    """The dataset's conversations in one seeded order, each once per cycle (card ``n``: the same in every process)."""

    def __init__(self, prompts: Sequence[Prompt], seed: int) -> None:
        if not prompts:
            raise ValueError("no conversations to deal")
        self._prompts = list(prompts)
        self._order = [int(i) for i in np.random.default_rng([seed, 7]).permutation(len(self._prompts))]

    def card(self, n: int) -> Prompt:
        """The conversation of session number ``n`` (0-based)."""
        return self._prompts[self._order[n % len(self._order)]]


class Session:
    """One conversation (id ``s<number>``): hands out its turns (:meth:`next_item`) and takes each answer back
    (:meth:`answered`). ``opening`` is the conversation to replay or the first prompt; ``turns_cap`` SESSION_TURNS;
    ``own_draw`` the next workload item when the caller has none (open loop); ``think_s`` draws think times, s."""

    def __init__(self, number: int, opening: Prompt, turns_cap: int, followups: Followups,
                 own_draw: Callable[[], WorkItem], think_s: Callable[[], float]) -> None:
        self.session_id = f"s{number}"
        self.followups = followups
        self.task = opening.task
        system, self._users = split_turns(opening) if followups == "dataset" else ([], [])
        self.history: list[Message] = system
        self._opening = opening
        self.planned = min(turns_cap, len(self._users)) if followups == "dataset" else turns_cap
        self.turn = 0
        self.over = False
        self.pending_think_s: float | None = None  # the pause before the next turn, drawn when an answer arrives
        self._own_draw = own_draw
        self._think_s = think_s

    def cap(self, turns: int) -> None:
        """Play at most ``turns`` turns (the open loop's last session of a request budget)."""
        self.planned = max(1, min(self.planned, turns))

    def next_item(self, draw: WorkItem | None = None) -> WorkItem:
        """The next turn, with ``draw``'s max_tokens (default: its own draw) and, ``drawn``, last user message.

        Raises:
            RuntimeError: the session is over (a bug of the caller).
        """
        if self.over:
            raise RuntimeError(f"session {self.session_id} is over")
        draw = draw or self._own_draw()
        if self.followups == "dataset":
            messages = [*self.history, {"role": "user", "content": self._users[self.turn]}]
        elif self.turn == 0:
            messages = [dict(m) for m in self._opening.messages]
        else:
            messages = [*self.history, {"role": "user", "content": draw.prompt.messages[-1]["content"]}]
        self.turn += 1
        prompt = Prompt(f"{self.session_id}-{self.turn}", self.task, messages)
        think = self.pending_think_s if self.turn > 1 else None
        return WorkItem(prompt, draw.max_tokens, conversation=self, session_id=self.session_id, turn=self.turn,
                        think_time_s=think)  # fmt: skip

    def answered(self, item: WorkItem, ok: bool, answer: str) -> None:
        """Keep ``answer`` for the next turn and draw the think time; a failed or last turn ends the session."""
        if not ok or self.turn >= self.planned:
            self.over = True
            self.pending_think_s = None
            return
        self.history = [*item.prompt.messages, {"role": "assistant", "content": answer}]
        self.pending_think_s = self._think_s()

    @property
    def unsent(self) -> int:
        """Planned turns not sent (after a failure ended the session early)."""
        return self.planned - self.turn
