"""Multi-turn conversations (SESSION_TURNS > 1): each session sends turn k+1 only after turn k's answer, with the
whole history so far (the model's actual answers), after the user's think time (THINK_TIME).

Where the turns come from (SESSION_FOLLOWUPS, :func:`followups_of`; recorded in the report as
``config.session_followups``):

- ``dataset`` (``auto`` when most entries are multi-turn conversations: ShareGPT ``conversations`` or ``messages``
  with several user turns). A session replays one conversation: its leading system messages, then its *real* user
  turns in order, each after the model's own answer to the one before (the dataset's recorded answers are not sent);
  it ends after its last user turn or SESSION_TURNS turns. Conversations are dealt in one seeded order, each once per
  cycle (:class:`ConversationDeck`): session number ``n`` of the run plays card ``n``, whichever process runs it.
- ``drawn`` (``auto`` for a dataset of single prompts, the bundled corpus): turn 1 is a workload prompt (all its
  messages), each later turn the last user message of another workload prompt; a session plays SESSION_TURNS turns.

A failed turn ends its session (there is no answer to carry). A session lives in the one load process that started
it, so a session never moves between workers or hosts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from loadgen.workloads.dataset import Prompt
from loadgen.workloads.workload import WorkItem

Followups = Literal["dataset", "drawn"]
Message = dict[str, str]


def split_turns(prompt: Prompt) -> tuple[list[Message], list[str]]:
    """``(leading system messages, the user turns' texts in order)`` of a dataset entry; the recorded assistant
    answers are dropped (a session sends the model's own)."""
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
    """Where a run's later turns come from: None without sessions (SESSION_TURNS 1); SESSION_FOLLOWUPS when it
    names one; ``auto``: ``dataset`` when at least half the entries are multi-turn conversations (a ShareGPT
    conversation file), else ``drawn`` (single prompts; the bundled corpus, whose few dialogue entries are prompts
    with context)."""
    if session_turns <= 1:
        return None
    if asked in ("dataset", "drawn"):
        return asked  # type: ignore[return-value]
    return "dataset" if multi_turn_share(prompts) >= 0.5 else "drawn"


class ConversationDeck:
    """The dataset's conversations in one seeded order, each once per cycle: :meth:`card` ``n`` is the same in
    every load process."""

    def __init__(self, prompts: Sequence[Prompt], seed: int) -> None:
        if not prompts:
            raise ValueError("no conversations to deal")
        self._prompts = list(prompts)
        self._order = [int(i) for i in np.random.default_rng([seed, 7]).permutation(len(self._prompts))]

    def card(self, n: int) -> Prompt:
        """The conversation of session number ``n`` (0-based)."""
        return self._prompts[self._order[n % len(self._order)]]


class Session:
    """One conversation: hands out its turns (:meth:`next_item`) and takes each answer back (:meth:`answered`,
    called by :func:`loadgen.locust_side.user_actions.send`).

    Args:
        number: the session's number in the run (its id is ``s<number>``).
        opening: the conversation to replay (``dataset``) or the first turn's prompt (``drawn``).
        turns_cap: SESSION_TURNS.
        followups: where later turns come from (module docstring).
        own_draw: the session's own next workload item (a follow-up's prompt and every later turn's max_tokens
            when the caller has no draw, as in the open loop).
        think_s: the session's think-time draws, seconds.
    """

    def __init__(
        self,
        number: int,
        opening: Prompt,
        turns_cap: int,
        followups: Followups,
        own_draw: Callable[[], WorkItem],
        think_s: Callable[[], float],
    ) -> None:
        self.number = number
        self.session_id = f"s{number}"
        self.followups = followups
        self.task = opening.task
        if followups == "dataset":
            self._system, self._users = split_turns(opening)
            self.history: list[Message] = list(self._system)
        else:
            self._system, self._users = [], []
            self.history = []
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
        """The next turn, with ``draw``'s max_tokens (default: the session's own draw); a ``drawn`` follow-up also
        takes ``draw``'s last user message.

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
        """Keep ``answer`` for the next turn and draw the think time before it; the session is over after its last
        turn or a failed one."""
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
