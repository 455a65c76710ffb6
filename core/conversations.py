"""Multi-turn conversation figures (pure), per turn index and per session (docs/reports.md, "Conversations").

Per turn k: TTFT, ITL, E2E (ms) and prompt tokens of successful k-th turns; prefix-cache hit = 100 x sum
``cached_tokens`` / sum ``prompt_tokens`` over turns that reported ``cached_tokens`` (None: never). Per session:
first scheduled send -> last turn's end, ms; turns played; whether a turn failed.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from core.records import LatencyStats, RequestRecord, effective_e2e_ms, effective_ttft_ms, latency_stats, shown
from core.records import mean_or_none as _mean


class TurnStats(BaseModel):
    """Successful requests of one turn of multi-turn sessions (SESSION_TURNS): later turns carry the history, so
    their prompts grow while a prefix cache keeps their TTFT down."""

    turn: int
    requests: int
    prompt_tokens_mean: float | None
    ttft: LatencyStats
    itl: LatencyStats | None = Field(default=None, description="Gaps between tokens of this turn's answers, ms.")
    e2e: LatencyStats | None = Field(default=None, description="Send → end of this turn's answers, ms.")
    cached_tokens_mean: float | None = Field(
        default=None, description="Prompt tokens found in the prefix cache per request (usage; None: not reported)."
    )
    cache_hit_percent: float | None = Field(
        default=None, description="100 × cached / prompt tokens of this turn (usage; None: not reported)."
    )


class SessionStats(BaseModel):
    """The conversations of a run (sessions with at least one measured turn)."""

    sessions: int
    turns_mean: float = Field(description="Turns a session played, mean.")
    failed: int = Field(description="Sessions that a failed turn ended.")
    total: LatencyStats = Field(
        description="First turn's send → last turn's end per session (think times included), ms."
    )
    think_time_mean_s: float | None = Field(default=None, description="Think time before the later turns, mean, s.")
    cache_hit_percent: float | None = Field(
        default=None,
        description="100 × cached / prompt tokens over every successful turn whose usage reported cached tokens.",
    )


def _hit_percent(rows: Sequence[RequestRecord]) -> float | None:
    told = [r for r in rows if r.cached_tokens is not None and r.prompt_tokens]
    prompt = sum(r.prompt_tokens or 0 for r in told)
    return 100.0 * sum(r.cached_tokens or 0 for r in told) / prompt if prompt else None


def turn_stats(ok: Sequence[RequestRecord]) -> list[TurnStats]:
    """Per turn (rows with a ``turn``), in turn order; empty without sessions."""
    turns: dict[int, list[RequestRecord]] = {}
    for r in ok:
        if r.turn is not None:
            turns.setdefault(r.turn, []).append(r)
    out = []
    for turn, rows in sorted(turns.items()):
        cached = [float(r.cached_tokens) for r in rows if r.cached_tokens is not None]
        out.append(
            TurnStats(
                turn=turn,
                requests=len(rows),
                prompt_tokens_mean=_mean([float(r.prompt_tokens) for r in rows if r.prompt_tokens is not None]),
                ttft=latency_stats([v for r in rows if (v := effective_ttft_ms(r)) is not None]),
                itl=latency_stats([gap for r in rows for gap in r.itl_ms]),
                e2e=latency_stats([v for r in rows if (v := effective_e2e_ms(r)) is not None]),
                cached_tokens_mean=_mean(cached),
                cache_hit_percent=_hit_percent(rows),
            )
        )
    return out


def session_stats(measured: Sequence[RequestRecord]) -> SessionStats | None:
    """The sessions of the measured rows that ended (ok or failed); None without sessions."""
    by_session: dict[str, list[RequestRecord]] = {}
    for r in measured:
        if r.session_id is not None:
            by_session.setdefault(r.session_id, []).append(r)
    if not by_session:
        return None
    totals = []
    for rows in by_session.values():
        first = min(rows, key=lambda r: r.scheduled_at or r.started_at)
        totals.append((max(r.ended_at for r in rows) - (first.scheduled_at or first.started_at)) * 1000.0)
    thinks = [r.think_time_s for r in measured if r.think_time_s is not None]
    return SessionStats(
        sessions=len(by_session),
        turns_mean=sum(len(rows) for rows in by_session.values()) / len(by_session),
        failed=sum(any(not r.ok for r in rows) for rows in by_session.values()),
        total=latency_stats(totals),
        think_time_mean_s=_mean(thinks),
        cache_hit_percent=_hit_percent([r for r in measured if r.ok]),
    )


def turns_text(stats: Sequence[TurnStats]) -> list[str]:
    """One line per turn: ``turn 2: 20 requests, 183 prompt tokens, TTFT P50 41 ms ..., prefix cache 71%``."""
    lines = []
    for t in stats:
        itl = shown(t.itl.p50_ms if t.itl else None, 1, " ms")
        e2e = shown(t.e2e.p50_ms if t.e2e else None, 0, " ms")
        cache = "" if t.cache_hit_percent is None else f", prefix cache {t.cache_hit_percent:.0f}%"
        lines.append(f"turn {t.turn}: {t.requests} requests, {shown(t.prompt_tokens_mean)} prompt tokens, TTFT P50 "
                     f"{shown(t.ttft.p50_ms, 0, ' ms')} P99 {shown(t.ttft.p99_ms, 0, ' ms')}, ITL P50 {itl}, "
                     f"E2E P50 {e2e}{cache}")  # fmt: skip
    return lines


def sessions_text(stats: SessionStats) -> str:
    """``20 sessions, 4.0 turns each, 0 ended by a failure; total time P50 8.1 s P99 12.4 s; think 2.0 s``."""

    def s(value: float | None) -> str:
        return "n/a" if value is None else f"{value / 1000.0:.1f} s"

    think = "" if stats.think_time_mean_s is None else f"; think time mean {stats.think_time_mean_s:.1f} s"
    cache = "" if stats.cache_hit_percent is None else f"; prefix cache {stats.cache_hit_percent:.0f}% (usage)"
    return (f"{stats.sessions} sessions, {stats.turns_mean:.1f} turns each, {stats.failed} ended by a failure; "
            f"total time P50 {s(stats.total.p50_ms)} P99 {s(stats.total.p99_ms)}{think}{cache}")  # fmt: skip
