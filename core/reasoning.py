"""Reasoning-aware latency (pure; docs/reports.md, "Reasoning models").

Reasoning TTFT: send -> first reasoning token; answer TTFT: send -> first ``content`` token (a row without reasoning:
its TTFT); thinking: between the two. Token split from ``usage.completion_tokens_details.reasoning_tokens`` when
sent, else the client's chunk counts (``tokens_source``). Open loop counts from the scheduled send.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel, Field

from core.records import LatencyStats, RequestRecord, latency_stats, shown


def reasoned(r: RequestRecord) -> bool:
    """The row's stream carried reasoning (a reasoning token, or usage counting reasoning tokens)."""
    return r.reasoning_ttft_ms is not None or bool(r.reasoning_tokens)


def answer_ttft_ms(r: RequestRecord) -> float | None:
    """Send -> first answer token, ms: a reasoning row's ``answer_ttft_ms``, any other row's TTFT."""
    value = r.answer_ttft_ms if r.reasoning_ttft_ms is not None else r.ttft_ms
    return None if value is None else value + r.queue_delay_ms


def think_ms(r: RequestRecord) -> float | None:
    """First reasoning token → first answer token, ms; None without both."""
    if r.reasoning_ttft_ms is None or r.answer_ttft_ms is None:
        return None
    return r.answer_ttft_ms - r.reasoning_ttft_ms


class ReasoningStats(BaseModel):
    """The successful requests of a run whose streams carried reasoning, beside its TTFT."""

    requests: int = Field(description="Successful requests whose stream carried reasoning.")
    no_answer: int = Field(
        default=0, description="Of those, requests whose answer never began (max_tokens spent on reasoning)."
    )
    reasoning_ttft: LatencyStats = Field(description="Send → first reasoning token, ms (reasoning rows).")
    answer_ttft: LatencyStats = Field(
        description="Send → first answer (content) token, ms, over every successful request (a row without "
        "reasoning: its TTFT)."
    )
    think: LatencyStats = Field(description="First reasoning token → first answer token, ms (reasoning rows).")
    reasoning_tokens_total: int
    answer_tokens_total: int
    reasoning_tokens_mean: float | None = Field(description="Reasoning tokens per reasoning request.")
    answer_tokens_mean: float | None = Field(description="Answer tokens per reasoning request.")
    tokens_source: dict[str, int] = Field(
        default_factory=dict,
        description="Reasoning requests by where their split came from: usage (completion_tokens_details) or "
        "chunks (counted by the client, marked as such).",
    )


def reasoning_stats(ok: Sequence[RequestRecord]) -> ReasoningStats | None:
    """Reasoning figures of the successful rows ``ok``; None when none reasoned."""
    rows = [r for r in ok if reasoned(r)]
    if not rows:
        return None
    first = [r.reasoning_ttft_ms + r.queue_delay_ms for r in rows if r.reasoning_ttft_ms is not None]
    reasoning = [r.reasoning_tokens or 0 for r in rows]
    answer = [r.answer_tokens or 0 for r in rows]
    return ReasoningStats(
        requests=len(rows),
        no_answer=sum(r.reasoning_ttft_ms is not None and r.answer_ttft_ms is None for r in rows),
        reasoning_ttft=latency_stats(first),
        answer_ttft=latency_stats([v for r in ok if (v := answer_ttft_ms(r)) is not None]),
        think=latency_stats([v for r in rows if (v := think_ms(r)) is not None]),
        reasoning_tokens_total=sum(reasoning),
        answer_tokens_total=sum(answer),
        reasoning_tokens_mean=sum(reasoning) / len(rows),
        answer_tokens_mean=sum(answer) / len(rows),
        tokens_source=dict(sorted(Counter(r.reasoning_tokens_source or "unknown" for r in rows).items())),
    )


def reasoning_text(stats: ReasoningStats, requests_ok: int) -> str:
    """``7 of 10 requests reasoned | answer TTFT P50 812 ms P99 1404 ms | thinking P50 700 ms | ...``."""
    a50, a99, r50, t50 = (shown(v, 0, " ms") for v in (stats.answer_ttft.p50_ms, stats.answer_ttft.p99_ms,
                                                        stats.reasoning_ttft.p50_ms, stats.think.p50_ms))
    sources = " + ".join(f"{n} {'from usage' if s == 'usage' else 'counted by chunks'}"
                         for s, n in stats.tokens_source.items())  # fmt: skip
    tail = f"; {stats.no_answer} never began their answer" if stats.no_answer else ""
    return (
        f"{stats.requests} of {requests_ok} requests reasoned | answer TTFT P50 {a50} P99 {a99} (TTFT counts the "
        f"first token of any kind) | reasoning TTFT P50 {r50} | thinking P50 {t50} | "
        f"{stats.reasoning_tokens_mean or 0:.0f} reasoning + {stats.answer_tokens_mean or 0:.0f} answer tokens per "
        f"request ({sources}){tail}"
    )
