"""Server cross-check: vLLM's own ``/metrics`` before and after the measured window, beside the client's view.

Counts should agree exactly, mean TTFT/E2E within a tolerance; :func:`client_overhead` is what the client added.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, Field

from core.records import RequestRecord
from core.records import mean_or_none as _mean
from core.serverview_overhead import CLIENT_OVERHEAD_MAX_PCT, ClientOverhead, _pct, client_overhead
from core.serverview_samples import LatencyView, Samples, _delta, latency_view

SUCCESS_REASONS = {"stop", "length", "repetition"}
# Failures where the client gave up on a stream the server had accepted: the server may have generated (and counted)
# tokens, or even finished the request, that the client never saw. Ctrl-C and DRAIN_S cut requests are `incomplete`.
CUT_KINDS = frozenset({"incomplete", "timeout", "connection", "no_done"})


class Agreement(BaseModel):
    """Client vs server for one quantity."""

    name: str
    client: float | None
    server: float | None
    diff_percent: float | None
    tolerance: str
    agrees: bool | None = Field(description="None when either side is missing.")


class ServerView(BaseModel):
    """vLLM's view of the measured window and its agreement with the client's."""

    requests_succeeded: int
    requests_aborted: int
    requests_errored: int
    prompt_tokens: int
    generation_tokens: int
    preemptions: int | None = Field(
        default=None, description="Requests vLLM preempted (KV cache full) during the window (None: not scraped)."
    )
    ttft: LatencyView
    e2e: LatencyView
    agreements: list[Agreement]
    disagreements: list[str] = Field(description="Human-readable lines for every check that failed.")
    prefix_cache_queries: int | None = Field(
        default=None, description="Prompt tokens vLLM looked up in its prefix cache over the window (None: no counter)."
    )
    prefix_cache_hits: int | None = Field(default=None, description="Of those, tokens found in the prefix cache.")
    prefix_cache_hit_rate_percent: float | None = Field(
        default=None,
        description="100 × hits / queries over the window (vllm:prefix_cache_hits_total / _queries_total deltas).",
    )
    requests_cut: int = Field(
        default=0,
        description="Measured requests the client cut mid-stream (Ctrl-C, drain, timeout, dropped connection); the "
        "server counted their work, so its counts may exceed the client's by that much.",
    )
    explained: list[str] = Field(
        default_factory=list,
        description="Differences between client and server that the cut requests account for (not disagreements).",
    )
    client_overhead: list[ClientOverhead] = Field(
        default_factory=list,
        description="What the client added to each server's own mean TTFT, ITL and E2E (one entry per server).",
    )


def _check(
    name: str, client: float | None, server: float | None, rel: float, abs_: float, label: str, extra: float = 0.0
) -> Agreement:
    agrees = None
    if client is not None and server is not None:
        agrees = abs(client - server) <= max(rel * abs(server), abs_) + extra
    return Agreement(
        name=name, client=client, server=server, diff_percent=_pct(client, server), tolerance=label, agrees=agrees
    )


def latency_check(
    name: str, client: float | None, server: float | None, rel: float, abs_ms: float, client_lag_ms: float | None
) -> Agreement:
    """A mean latency (ms): client within ``max(rel x server, abs_ms)`` (+ ``client_lag_ms``) of server."""
    lag = client_lag_ms or 0.0
    label = f"max({rel:.0%}, {abs_ms:.0f} ms)" + (f" + client lag {lag:.1f} ms" if lag else "")
    return _check(name, client, server, rel, abs_ms, label, extra=lag)


def _within(name: str, client: float | None, server: float, extra: float, cut: int) -> Agreement:
    """``client <= server <= client + extra`` (the server also counted ``cut`` requests' work)."""
    agrees = None if client is None else client <= server <= client + extra
    label = f"exact, plus up to {cut} cut request(s)" + ("" if math.isinf(extra) else f" (<= +{extra:.0f})")
    return Agreement(
        name=name, client=client, server=server, diff_percent=_pct(client, server), tolerance=label, agrees=agrees
    )


def _cut_bounds(cut: Sequence[RequestRecord]) -> dict[str, float]:
    """The most the server can have counted for cut requests beyond the client (unknown: no bound)."""
    asked = [r.max_tokens for r in cut]
    return {
        "requests_succeeded": float(len(cut)),
        "generation_tokens": math.inf if None in asked else float(sum(a or 0 for a in asked)),
        "prompt_tokens": math.inf,
    }


def cross_check(
    before: Samples,
    after: Samples,
    records: Sequence[RequestRecord],
    *,
    server_url: str | None = None,
    max_added_pct: float = CLIENT_OVERHEAD_MAX_PCT,
    client_lag_ms: float | None = None,
) -> ServerView:
    """Compare the server's window (``after - before``) with the client's measured rows.

    Counts exact; mean TTFT within max(30 %, 75 ms), mean E2E within max(15 %, 100 ms) (the client also pays HTTP,
    SSE and the network; +36 ms TTFT measured on a loaded 2-core host), plus ``client_lag_ms``. With cut requests
    (:data:`CUT_KINDS`) counts may exceed the client's by what they could add (``explained``)."""
    ok = [r for r in records if r.phase == "measured" and r.ok]
    cut = [r for r in records if r.phase == "measured" and not r.ok and r.error_kind in CUT_KINDS]
    bounds = _cut_bounds(cut)
    ttft = latency_view(before, after, "vllm:time_to_first_token_seconds")
    e2e = latency_view(before, after, "vllm:e2e_request_latency_seconds")
    succeeded = sum(_delta(before, after, "vllm:request_success_total", finished_reason=r) for r in SUCCESS_REASONS)
    # vLLM's TTFT histogram holds every request's first token, those failed or cut after it included; its E2E
    # histogram only requests that finished: the client's means are over the same requests
    client_ttft = [r.ttft_ms for r in records if r.phase == "measured" and r.ttft_ms is not None]
    client_e2e = [r.e2e_ms for r in ok if r.e2e_ms is not None]
    usage_known = all(r.output_tokens is not None for r in ok)

    def exact(name: str, client: float | None, server: float) -> Agreement:
        if cut:
            return _within(name, client, server, bounds[name], len(cut))
        return _check(name, client, server, 0.0, 0.0, "exact")

    client_output = float(sum(r.output_tokens or 0 for r in ok)) if usage_known else None
    client_prompt = float(sum(r.prompt_tokens or 0 for r in ok)) if usage_known else None
    checks = [
        exact("requests_succeeded", float(len(ok)), succeeded),
        exact("generation_tokens", client_output, _delta(before, after, "vllm:generation_tokens_total")),
        exact("prompt_tokens", client_prompt, _delta(before, after, "vllm:prompt_tokens_total")),
        latency_check("ttft_mean_ms", _mean(client_ttft), ttft.mean_ms, 0.30, 75.0, client_lag_ms),
        latency_check("e2e_mean_ms", _mean(client_e2e), e2e.mean_ms, 0.15, 100.0, client_lag_ms),
    ]
    disagreements = [
        f"{c.name}: client {c.client:.1f} vs server {c.server:.1f} (tolerance {c.tolerance})"
        for c in checks
        if c.agrees is False and c.client is not None and c.server is not None
    ]
    explained = [
        f"{c.name}: server {c.server:.0f} vs client {c.client:.0f}: the {c.server - c.client:+.0f} are the work of "
        f"{len(cut)} request(s) cut mid-stream (counted by the server, not received by the client)"
        for c in checks[:3]
        if cut and c.agrees and c.client is not None and c.server is not None and c.server != c.client
    ]
    queries, hits, hit_rate = prefix_cache_delta(before, after)
    return ServerView(
        prefix_cache_queries=queries,
        prefix_cache_hits=hits,
        prefix_cache_hit_rate_percent=hit_rate,
        requests_succeeded=round(succeeded),
        requests_aborted=round(_delta(before, after, "vllm:request_success_total", finished_reason="abort")),
        requests_errored=round(_delta(before, after, "vllm:request_success_total", finished_reason="error")),
        prompt_tokens=round(_delta(before, after, "vllm:prompt_tokens_total")),
        generation_tokens=round(_delta(before, after, "vllm:generation_tokens_total")),
        preemptions=max(0, round(_delta(before, after, "vllm:num_preemptions_total")))
        if "vllm:num_preemptions_total" in after
        else None,
        ttft=ttft,
        e2e=e2e,
        agreements=checks,
        disagreements=disagreements,
        requests_cut=len(cut),
        explained=explained,
        client_overhead=[client_overhead(before, after, records, server_url=server_url, max_added_pct=max_added_pct)],
    )


PREFIX_QUERIES = "vllm:prefix_cache_queries_total"  # vllm/v1/metrics/loggers.py: counter "vllm:prefix_cache_queries"
PREFIX_HITS = "vllm:prefix_cache_hits_total"


def prefix_cache_delta(before: Samples, after: Samples) -> tuple[int | None, int | None, float | None]:
    """``(queries, hits, hit rate %)`` of vLLM's prefix cache over the window; None where unknown."""
    if PREFIX_QUERIES not in after or PREFIX_HITS not in after:
        return None, None, None
    queries = max(0, round(_delta(before, after, PREFIX_QUERIES)))
    hits = max(0, round(_delta(before, after, PREFIX_HITS)))
    return queries, hits, (100.0 * hits / queries if queries else None)


def verdict_text(view: ServerView) -> str:
    """``agree``, ``agree (2 request(s) cut mid-stream account for ...)`` or ``DISAGREE: ...``."""
    if view.disagreements:
        return "DISAGREE: " + "; ".join(view.disagreements)
    if view.explained:
        return f"agree ({view.requests_cut} request(s) cut mid-stream account for the server's extra counts)"
    return "agree"
