"""Whether the engine can answer a planned closed-loop load within REQUEST_TIMEOUT_S, judged from the warm-up before
the load is sent (a host too slow for 50 users once answered 0 of 200 after 15 minutes of timeouts).

REQUEST_TIMEOUT_S bounds the wait for each chunk, so a request times out when its first token comes too late. When
``concurrency`` users start at once, vLLM prefills their prompts one budget after another: the last one waits for all
of them, about ``concurrency × prompt_tokens / prefill_tok_per_s`` seconds. The warm-up sends ``at_once`` requests
together; the last first token among them came after their prompts were prefilled, so ``sum(prompt tokens) / max(TTFT)``
is the engine's prefill rate (a lower bound: the wait includes decoding steps in between). Measured on ERNIE-4.5-0.3B
(docs/benchmarks.md): a 2-core AVX-512 host prefills ≈ 330 prompt tok/s, so 50 users of 365-token prompts wait ≈ 55 s
for the last first token (the run's TTFT P99 was 39.9 s); an AVX2 host emulating bfloat16 prefills 41 tok/s, ≈ 445 s,
and every request of that run timed out; in float32 it prefills 159 tok/s, ≈ 115 s.

Requests that time out are replaced at once by new ones whose prompts must be prefilled too: the engine never gets
to decode, which is why such a run ends with no success at all rather than with a few timeouts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from core.records import RequestRecord

SERVABLE_SHARE = 0.5
"""The load offered as servable keeps the last first token of its first wave within this share of REQUEST_TIMEOUT_S;
past it a warning says to expect timeouts."""


@dataclass(frozen=True)
class Capacity:
    """The engine's prefill speed over the warm-up and what it means for ``concurrency`` users starting together.

    Attributes:
        prefill_tok_per_s: prompt tokens prefilled per second (the warm-up's prompt tokens / its latest TTFT).
        output_tok_per_s: output tokens per second over the warm-up (first send to last end), for the message.
        at_once: warm-up requests in flight at once.
        prompt_tokens: mean prompt tokens of a warm-up request (the chat template included).
        concurrency: users of the planned load.
        timeout_s: REQUEST_TIMEOUT_S.
    """

    prefill_tok_per_s: float
    output_tok_per_s: float
    at_once: int
    prompt_tokens: float
    concurrency: int
    timeout_s: float

    @property
    def first_wave_ttft_s(self) -> float:
        """Estimated wait, s, of the last of ``concurrency`` users starting together for its first token."""
        return self.concurrency * self.prompt_tokens / self.prefill_tok_per_s

    @property
    def servable_users(self) -> int:
        """The most users whose first wave gets every first token within :data:`SERVABLE_SHARE` of the timeout."""
        return max(1, math.floor(SERVABLE_SHARE * self.timeout_s * self.prefill_tok_per_s / self.prompt_tokens))

    def measured(self) -> str:
        """What the warm-up measured, for the lines below."""
        return (
            f"the warm-up of {self.at_once} request(s) at once measured {self.prefill_tok_per_s:.0f} prompt tok/s "
            f"prefilled, {self.output_tok_per_s:.1f} output tok/s, {self.prompt_tokens:.0f}-token prompts"
        )

    def refusal(self) -> str | None:
        """Why the load cannot be served (its last first tokens would come after the timeout), with the load that can;
        None when it can."""
        if self.first_wave_ttft_s <= self.timeout_s:
            return None
        return (
            f"At {self.concurrency} users starting together this engine would give the last of them its first token "
            f"after about {self.first_wave_ttft_s:.0f} s, over REQUEST_TIMEOUT_S={self.timeout_s:g} s: requests would "
            f"time out and be replaced faster than it answers ({self.measured()}). It can serve --concurrency "
            f"{self.servable_users}; or raise --request-timeout; --no-capacity-check (CAPACITY_CHECK=0) sends the load "
            "anyway."
        )

    def warning(self) -> str | None:
        """A note when the first wave fits the timeout with less than the margin; else None."""
        if self.refusal() or self.first_wave_ttft_s <= SERVABLE_SHARE * self.timeout_s:
            return None
        return (
            f"At {self.concurrency} users the last first token of the first wave comes after about "
            f"{self.first_wave_ttft_s:.0f} s, near REQUEST_TIMEOUT_S={self.timeout_s:g} s: expect timeouts "
            f"({self.measured()}; --concurrency {self.servable_users} keeps within half of it)"
        )


def warmup_capacity(rows: Sequence[RequestRecord], at_once: int, concurrency: int, timeout_s: float) -> Capacity | None:
    """The :class:`Capacity` the warm-up ``rows`` show (sent ``at_once`` at a time), or None when they cannot tell:
    fewer than two successful answers with prompt token counts and a first token, or no time elapsed."""
    answered = [r for r in rows if r.ok and r.prompt_tokens and r.ttft_ms]
    if len(answered) < 2:
        return None
    first = sorted(answered, key=lambda r: r.started_at)[: max(1, at_once)]  # the requests sent together
    latest_ttft_s = max(r.ttft_ms or 0.0 for r in first) / 1000
    wall_s = max(r.ended_at for r in rows) - min(r.started_at for r in rows)
    if latest_ttft_s <= 0 or wall_s <= 0:
        return None
    prompt = sum(r.prompt_tokens or 0 for r in first)
    output = sum(r.output_tokens or 0 for r in answered)
    return Capacity(prompt / latest_ttft_s, output / wall_s, len(first), prompt / len(first), concurrency, timeout_s)
