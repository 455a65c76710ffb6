"""Multi-turn sessions (SESSION_TURNS > 1): each closed-loop user holds a conversation whose later turns carry the
model's actual earlier answers, so the server sees growing prompts that share their prefix (prefix caching shows in
TTFT and in vLLM's prefix-cache counters).

Turn 1 is a prompt of the workload (all its messages); each later turn is the conversation so far, the model's
answer to the previous turn, and the last user message of the next workload prompt. A conversation ends after
SESSION_TURNS turns, or at a failed turn (there is no answer to carry), and the user starts a new one.
"""

from __future__ import annotations

import uuid

from loadgen.workloads.dataset import Prompt
from loadgen.workloads.workload import WorkItem, WorkloadSampler


class Conversation:
    """One user's conversation: hands out its turns and takes each answer back
    (:func:`loadgen.locust_side.user_actions.send`)."""

    def __init__(self, turns: int, sampler: WorkloadSampler) -> None:
        self.turns = turns
        self.sampler = sampler
        self._restart()

    def _restart(self) -> None:
        self.session_id = uuid.uuid4().hex[:12]
        self.history: list[dict[str, str]] = []
        self.turn = 0

    def next_item(self, draw: WorkItem | None = None) -> WorkItem:
        """The next turn to send (a new conversation's first turn after the last one), built on ``draw`` (the
        request's workload item; default: the sampler's next)."""
        draw = draw or self.sampler.next()
        if self.turn == 0:
            messages = list(draw.prompt.messages)
        else:
            messages = [*self.history, {"role": "user", "content": draw.prompt.messages[-1]["content"]}]
        self.turn += 1
        prompt = Prompt(f"{self.session_id}-{self.turn}", draw.prompt.task, messages)
        return WorkItem(prompt, draw.max_tokens, conversation=self, session_id=self.session_id, turn=self.turn)

    def answered(self, item: WorkItem, ok: bool, answer: str) -> None:
        """Keep ``answer`` for the next turn; start over after the last turn or a failed one."""
        if not ok or self.turn >= self.turns or item.session_id != self.session_id:
            self._restart()
            return
        self.history = [*item.prompt.messages, {"role": "assistant", "content": answer}]
