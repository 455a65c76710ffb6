"""Pure benchmark maths: latency distributions, throughput, goodput and stability from request records.

As vLLM's ``benchmarks/serve.py``: TTFT = send -> first token; E2E = send -> end; TPOT = (E2E - TTFT) / (output
tokens - 1); ITL = every gap between token chunks, pooled. Open loop counts from the scheduled send. Percentiles:
``numpy.percentile`` (linear). Throughputs divide by the window (first send -> last end). Goodput: successful
requests meeting every SLO per second.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, Field

from core.conversations import SessionStats, TurnStats, session_stats, turn_stats
from core.reasoning import ReasoningStats, answer_ttft_ms, reasoning_stats
from core.records import (
    CutRequests,
    LatencyStats,
    RequestRecord,
    cut_requests,
    effective_e2e_ms,
    effective_ttft_ms,
    latency_stats,
)
from core.schedule import ScheduleStats, schedule_stats
from core.steady import SteadyState, decode_tokens_in, steady_state


def meets_slo(r: RequestRecord, slo: dict[str, float]) -> bool:
    """True when ``r`` succeeded and every SLO bound holds (missing values fail)."""
    if not r.ok:
        return False
    values = {"ttft_ms": effective_ttft_ms(r), "tpot_ms": r.tpot_ms, "e2e_ms": effective_e2e_ms(r),
              "answer_ttft_ms": answer_ttft_ms(r)}  # fmt: skip
    return all(values[name] is not None and values[name] <= bound for name, bound in slo.items())  # type: ignore[operator]


def peak_concurrency(records: Sequence[RequestRecord]) -> int:
    """Most requests in flight at one instant (an end before a start at a tie); pass cut rows too."""
    events = sorted([(r.started_at, 1) for r in records] + [(r.ended_at, -1) for r in records])
    peak = current = 0
    for _, step in events:
        current += step
        peak = max(peak, current)
    return peak


class WindowStats(BaseModel):
    """One time slice of the measured window (requests are placed by their end time)."""

    start_s: float = Field(description="Seconds since the window start.")
    end_s: float
    completed: int
    failed: int
    throughput_req_per_sec: float
    output_tokens_per_sec: float
    e2e_p50_ms: float | None


def time_windows(records: Sequence[RequestRecord], count: int = 10) -> list[WindowStats]:
    """``count`` equal slices: completions (by end), decoded output tokens and p50 E2E per slice."""
    if not records:
        return []
    start = min(r.started_at for r in records)
    total_s = max(r.ended_at for r in records) - start
    if total_s <= 0:
        return []
    width = total_s / count
    out = []
    for i in range(count):
        lo, hi = i * width, (i + 1) * width
        inside = [r for r in records if lo <= r.ended_at - start < hi or (i == count - 1 and r.ended_at - start == hi)]
        ok = [r for r in inside if r.ok]
        out.append(
            WindowStats(
                start_s=lo,
                end_s=hi,
                completed=len(ok),
                failed=len(inside) - len(ok),
                throughput_req_per_sec=len(ok) / width,
                output_tokens_per_sec=sum(decode_tokens_in(r, start, lo, hi) for r in records) / width,
                e2e_p50_ms=latency_stats([e for r in ok if (e := effective_e2e_ms(r)) is not None]).p50_ms,
            )
        )
    return out


class OutputLengths(BaseModel):
    """Requested (``max_tokens``) versus actual (``usage``) output lengths of successful requests, tokens."""

    requested_mean: float | None
    actual_mean: float | None
    actual_p50: float | None
    actual_p95: float | None
    usage_missing: int = Field(
        description="Successful requests whose stream carried no usage block (counted by /tokenize or chunks)."
    )
    chunk_count_mismatch: int = Field(
        description="Requests whose client-counted content chunks differ from usage.completion_tokens."
    )


class RunMetrics(BaseModel):
    """Aggregate figures of the measured phase of one benchmark run. A run in which no measured request ended (all
    cut by its end, or none sent) has its counts, its window and its cut requests; every figure of ended requests is
    None (the latencies, the error rate, the goodput), and the throughputs are 0 (nothing completed)."""

    requests_total: int = Field(description="Measured requests that ended (ok or failed); incomplete ones apart.")
    requests_ok: int
    requests_failed: int
    requests_incomplete: int = Field(
        default=0,
        description="Still in flight when the run ended (DURATION + DRAIN_S, or Ctrl-C): cancelled and left out of "
        "every other figure, as GuideLLM reports them.",
    )
    errors_by_kind: dict[str, int]
    duration_s: float
    throughput_req_per_sec: float
    output_tokens_total: int
    output_tokens_per_sec: float
    prompt_tokens_total: int
    total_tokens_per_sec: float
    peak_concurrency: int
    e2e: LatencyStats
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats
    queue_delay: LatencyStats
    steady: SteadyState | None = Field(
        default=None, description="The steady-state window and its figures (core.steady); None in older reports."
    )
    schedule: ScheduleStats | None = Field(
        default=None, description="Open loop: requested vs achieved rate and the send delay (core.schedule)."
    )
    error_rate_percent: float | None = Field(
        description="Failed / ended measured requests, %; None when no measured request ended (all cut)."
    )
    goodput_req_per_sec: float | None
    goodput_percent: float | None
    slo: dict[str, float]
    output_lengths: OutputLengths
    windows: list[WindowStats]
    throughput_variation_percent: float | None
    output_token_sources: dict[str, int] = Field(
        default_factory=dict,
        description="Successful requests by where their token counts came from: usage (the server's usage block), "
        "tokenize (the server's /tokenize on the answer text) or chunks (the client's count of content chunks).",
    )
    turns: list[TurnStats] = Field(
        default_factory=list,
        description="Multi-turn sessions: prompt size, TTFT, ITL, E2E and prefix-cache hits per turn (empty "
        "without; core.conversations).",
    )
    sessions: SessionStats | None = Field(
        default=None, description="Multi-turn sessions: count, turns, total time per session; None without."
    )
    reasoning: ReasoningStats | None = Field(
        default=None,
        description="Reasoning streams: answer TTFT beside TTFT, thinking time, reasoning and answer tokens "
        "(core.reasoning); None when no stream carried reasoning.",
    )
    cut: CutRequests | None = Field(
        default=None, description="What the requests cut by the run's end had received; None when none was cut."
    )


def measured_window_s(records: Sequence[RequestRecord]) -> float:
    """Seconds from the first measured request's send to the last one's end (0 when empty)."""
    if not records:
        return 0.0
    return max(max(r.ended_at for r in records) - min(r.started_at for r in records), 0.0)


def output_lengths(ok: Sequence[RequestRecord]) -> OutputLengths:
    """Requested vs actual output lengths and usage/chunk consistency of successful requests."""
    actual = latency_stats([float(r.output_tokens) for r in ok if r.output_tokens is not None])
    requested = [float(r.max_tokens) for r in ok if r.max_tokens is not None]
    return OutputLengths(
        requested_mean=float(np.mean(requested)) if requested else None,
        actual_mean=actual.mean_ms,  # the distribution's figures, here of tokens
        actual_p50=actual.p50_ms,
        actual_p95=actual.p95_ms,
        usage_missing=sum(r.output_tokens_source not in (None, "usage") or r.output_tokens is None for r in ok),
        chunk_count_mismatch=sum(r.output_tokens is not None and r.output_tokens != r.content_chunks for r in ok),
    )


def throughput_variation_percent(
    windows: Sequence[WindowStats], measured: Sequence[RequestRecord], steady: SteadyState
) -> float | None:
    """Coefficient of variation of per-slice output tok/s, %, over the slices of the steady window, else from the
    second slice to the last send. None with nothing ended, fewer than 3 such slices or 10 completions."""
    if not measured:
        return None
    if steady.found and steady.start_s is not None and steady.end_s is not None:
        first, limit = steady.start_s, steady.end_s
    else:
        first = windows[1].start_s if len(windows) > 1 else 0.0
        limit = max(r.started_at for r in measured) - min(r.started_at for r in measured)
    inner = [w.output_tokens_per_sec for w in windows if w.start_s >= first - 1e-9 and w.end_s <= limit + 1e-9]
    if len(inner) < 3 or not any(inner) or sum(w.completed for w in windows) < 10:
        return None  # too little to judge
    arr = np.asarray(inner)
    return float(arr.std() / arr.mean() * 100.0)


def run_metrics(
    records: Sequence[RequestRecord],
    slo: dict[str, float] | None = None,
    requested_rate_req_per_sec: float | None = None,
) -> RunMetrics:
    """Aggregate the ``measured`` records; ``requested_rate_req_per_sec`` is the open loop's RATE. The window runs from
    the first measured send to the last end (none ended: the last cut)."""
    every = [r for r in records if r.phase == "measured"]
    measured = [r for r in every if r.error_kind != "incomplete"]
    ok = [r for r in measured if r.ok]
    duration_s = measured_window_s(measured or every)
    per_s = 1.0 / duration_s if duration_s > 0 else 0.0
    output_tokens = sum(r.output_tokens or 0 for r in ok)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
    kinds = Counter(r.error_kind or "unknown" for r in measured if not r.ok)
    slo = slo or {}
    good = sum(meets_slo(r, slo) for r in ok) if slo else None
    windows = time_windows(measured)
    steady = steady_state(measured)
    return RunMetrics(
        requests_total=len(measured),
        requests_ok=len(ok),
        requests_failed=len(measured) - len(ok),
        requests_incomplete=len(every) - len(measured),
        errors_by_kind=dict(sorted(kinds.items())),
        duration_s=duration_s,
        throughput_req_per_sec=len(ok) * per_s,
        output_tokens_total=output_tokens,
        output_tokens_per_sec=output_tokens * per_s,
        prompt_tokens_total=prompt_tokens,
        total_tokens_per_sec=(output_tokens + prompt_tokens) * per_s,
        peak_concurrency=peak_concurrency(every),  # requests cut by the run's end were in flight too
        e2e=latency_stats([v for r in ok if (v := effective_e2e_ms(r)) is not None]),
        ttft=latency_stats([v for r in ok if (v := effective_ttft_ms(r)) is not None]),
        tpot=latency_stats([v for r in ok if (v := r.tpot_ms) is not None]),
        itl=latency_stats([gap for r in ok for gap in r.itl_ms]),
        queue_delay=latency_stats([r.queue_delay_ms for r in measured if r.scheduled_at is not None]),
        schedule=schedule_stats(every, requested_rate_req_per_sec),
        steady=steady,
        error_rate_percent=100.0 * (len(measured) - len(ok)) / len(measured) if measured else None,
        goodput_req_per_sec=None if good is None or not measured else good * per_s,
        goodput_percent=None if good is None or not measured else 100.0 * good / len(measured),
        slo=slo,
        output_lengths=output_lengths(ok),
        windows=windows,
        throughput_variation_percent=throughput_variation_percent(windows, measured, steady),
        output_token_sources=dict(sorted(Counter(r.output_tokens_source or "unknown" for r in ok).items())),
        turns=turn_stats(ok),
        cut=cut_requests(every),
        sessions=session_stats(measured),
        reasoning=reasoning_stats(ok),
    )


def nothing_ended_text(m: RunMetrics) -> str:
    """The key insight of a run in which no measured request ended (or none was sent)."""
    cut = m.cut
    if cut is None:
        return "No measured request was sent: nothing was measured"
    causes = ", ".join(f"{cause} {n}" for cause, n in cut.by_cause.items())
    waited = f" after up to {cut.in_flight.max_ms / 1000.0:.0f} s in flight" if cut.in_flight.max_ms is not None else ""
    first = (
        f"{cut.with_first_token} had a first token (TTFT p50 {cut.ttft.p50_ms:,.0f} ms)"
        if cut.ttft.p50_ms is not None
        else "none had a first token"
    )
    return (
        f"No measured request ended: all {cut.requests} sent were cut{waited} ({causes}); {first}. The server "
        "answers slower than the run lasted: run longer (DURATION, DRAIN_S) or with less load"
    )


MOSTLY_FAILED_PCT = 50.0
"""Error rate, %, from which the key insight leads with the failures instead of judging the throughput stable."""


def key_insight(m: RunMetrics) -> str:
    """One sentence on the run's health (``Throughput stable at 1.9 req/s ...``), with steady-state figures when found;
    at least :data:`MOSTLY_FAILED_PCT` failed leads with that."""
    if m.requests_total == 0:
        return nothing_ended_text(m)
    problems = []
    if m.errors_by_kind:
        worst = max(m.errors_by_kind.items(), key=lambda kv: kv[1])
        problems.append(f"{m.requests_failed} failed ({m.error_rate_percent or 0.0:.1f}%, mostly {worst[0]})")
    if m.requests_incomplete:
        problems.append(f"{m.requests_incomplete} still in flight at the end (incomplete, left out)")
    if m.schedule is not None and m.schedule.fell_behind:
        problems.append(f"client fell behind its open-loop schedule ({m.schedule.reason})")
    cv = m.throughput_variation_percent
    steady = m.steady if m.steady is not None and m.steady.found else None
    req_s = steady.throughput_req_per_sec if steady and steady.throughput_req_per_sec is not None else None
    tok_s = steady.output_tokens_per_sec if steady and steady.output_tokens_per_sec is not None else None
    if steady is None or req_s is None or tok_s is None:
        req_s, tok_s = m.throughput_req_per_sec, m.output_tokens_per_sec
        which = "whole run"
        if m.steady is not None and m.steady.reason and (cv is None or cv > 10):  # why not, and what to do
            which += f"; no steady state: {m.steady.reason}"
    else:
        which = (
            f"steady state {steady.start_s:.0f}–{steady.end_s:.0f} s of {m.duration_s:.0f} s; "
            f"whole run {m.throughput_req_per_sec:.2f} req/s"
        )
    if cv is None:
        shape = f"Throughput {req_s:.2f} req/s ({which}; run too short to judge stability)"
    else:
        how = "stable at" if cv <= 10 else "unstable around"
        shape = f"Throughput {how} {req_s:.2f} req/s ({tok_s:.0f} output tok/s ±{cv:.1f}% between windows; {which})"
    if (m.error_rate_percent or 0.0) >= MOSTLY_FAILED_PCT:  # the throughput is of the few successes: no health
        shape = (f"Most requests failed, so the throughput ({req_s:.2f} req/s of successes, {which}) says nothing "
                 "about the server")  # fmt: skip
    if not problems:
        return f"{shape}, no error or timeout observed"
    return f"{shape}; " + "; ".join(problems)
