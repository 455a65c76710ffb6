"""Whether the engine can answer a planned closed-loop load within REQUEST_TIMEOUT_S, judged from the warm-up.

``concurrency`` users starting at once wait, the last of them, about ``concurrency × prompt_tokens /
prefill_tok_per_s`` s for a first token; the warm-up's ``at_once`` requests give the prefill rate as
``sum(prompt tokens) / max(TTFT)`` (a lower bound). Timed-out requests are replaced by new prompts to prefill, so such
a run ends with no success at all. Measurements on ERNIE-4.5-0.3B (AVX-512 ≈ 330, AVX2 bf16 41 prompt tok/s):
docs/benchmarks.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from core.records import RequestRecord

SERVABLE_SHARE = 0.5  # servable: the first wave's last first token within this share of REQUEST_TIMEOUT_S


@dataclass(frozen=True)
class Capacity:
    """The warm-up's prefill and output speeds (tok/s) over ``at_once`` requests of ``prompt_tokens`` (mean, chat
    template included), and what they mean for ``concurrency`` users under REQUEST_TIMEOUT_S ``timeout_s``."""

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
        return (f"the warm-up of {self.at_once} request(s) at once measured {self.prefill_tok_per_s:.0f} prompt tok/s "
                f"prefilled, {self.output_tok_per_s:.1f} output tok/s, {self.prompt_tokens:.0f}-token prompts")

    def refusal(self) -> str | None:
        """Why the load cannot be served (last first tokens after the timeout), with the load that can; else None."""
        if self.first_wave_ttft_s <= self.timeout_s:
            return None
        return (f"At {self.concurrency} users starting together this engine would give the last of them its first "
                f"token after about {self.first_wave_ttft_s:.0f} s, over REQUEST_TIMEOUT_S={self.timeout_s:g} s: "
                f"requests would time out and be replaced faster than it answers ({self.measured()}). It can serve "
                f"--concurrency {self.servable_users}; or raise --request-timeout; --no-capacity-check "
                "(CAPACITY_CHECK=0) sends the load anyway.")

    def warning(self) -> str | None:
        """A note when the first wave fits the timeout with less than the margin; else None."""
        if self.refusal() or self.first_wave_ttft_s <= SERVABLE_SHARE * self.timeout_s:
            return None
        return (f"At {self.concurrency} users the last first token of the first wave comes after about "
                f"{self.first_wave_ttft_s:.0f} s, near REQUEST_TIMEOUT_S={self.timeout_s:g} s: expect timeouts "
                f"({self.measured()}; --concurrency {self.servable_users} keeps within half of it)")


def warmup_capacity(rows: Sequence[RequestRecord], at_once: int, concurrency: int, timeout_s: float) -> Capacity | None:
    """The :class:`Capacity` the warm-up ``rows`` (sent ``at_once`` at a time) show; None with fewer than two
    answers that have prompt tokens and a first token, or no time elapsed."""
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
