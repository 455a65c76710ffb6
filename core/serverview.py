"""Server cross-check: vLLM's own ``/metrics`` before and after the measured window, beside the client's view.

Counts should agree exactly, mean TTFT/E2E within a tolerance; :func:`client_overhead` is what the client added to the
server's own clock (mean TTFT, ITL and E2E, client minus server; one entry per server or replica).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from core.records import RequestRecord
from core.records import mean_or_none as _mean
from core.serverview_samples import LatencyView, Samples, delta, latency_view

SUCCESS_REASONS = {"stop", "length", "repetition"}
# Failures where the client gave up on a stream the server had accepted: the server may have generated (and counted)
# tokens, or even finished the request, that the client never saw. Ctrl-C and DRAIN_S cut requests are `incomplete`.
CUT_KINDS = frozenset({"incomplete", "timeout", "connection", "no_done"})
ADDED_FIGURES = (  # (name, vLLM histogram, the least added ms ever flagged: below it a share means nothing)
    ("ttft", "vllm:time_to_first_token_seconds", 5.0),
    ("itl", "vllm:inter_token_latency_seconds", 0.5),
    ("e2e", "vllm:e2e_request_latency_seconds", 5.0),
)
CLIENT_OVERHEAD_MAX_PCT = 10.0  # default of the CLIENT_OVERHEAD_MAX_PCT setting
PREEMPTIONS = "vllm:num_preemptions_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"  # vllm/v1/metrics/loggers.py: counter "vllm:prefix_cache_queries"
PREFIX_HITS = "vllm:prefix_cache_hits_total"


class Agreement(BaseModel):
    """Client vs server for one quantity."""

    name: str
    client: float | None
    server: float | None
    diff_percent: float | None
    tolerance: str
    agrees: bool | None = Field(description="None when either side is missing.")


class AddedLatency(BaseModel):
    """One latency as the client measured it and as the server's own histogram did, over the same window."""

    name: str = Field(description="ttft, itl or e2e.")
    client_mean_ms: float | None
    server_mean_ms: float | None = Field(description="_sum / _count delta of the server's histogram; None: empty.")
    added_ms: float | None = Field(description="client_mean_ms - server_mean_ms: what the client's side added.")
    added_percent: float | None = Field(description="added_ms as a share of server_mean_ms, %.")


class ClientOverhead(BaseModel):
    """What the client added to one server's own TTFT, ITL and E2E over the measured window."""

    server_url: str | None = Field(default=None, description="The server scraped (one entry per replica).")
    figures: list[AddedLatency] = Field(default_factory=list, description="ttft, itl, e2e (those measured).")
    max_added_pct: float = Field(description="The share above which a figure is flagged (CLIENT_OVERHEAD_MAX_PCT).")
    flagged: list[str] = Field(default_factory=list, description="Names of the figures the client added too much to.")
    missing: str | None = Field(default=None, description="Why the comparison could not be made, when it could not.")


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


def _pct(client: float | None, server: float | None) -> float | None:
    if client is None or server is None or server == 0:
        return None
    return (client - server) / server * 100.0


def _check(name: str, client: float | None, server: float | None, agrees: bool | None, label: str) -> Agreement:
    return Agreement(
        name=name, client=client, server=server, diff_percent=_pct(client, server), tolerance=label, agrees=agrees
    )


def mean_checks(
    before: Samples, after: Samples, client_ttft: float | None, client_e2e: float | None, client_lag_ms: float | None
) -> tuple[LatencyView, LatencyView, list[Agreement]]:
    """The server's TTFT and E2E over the window and the client's means (ms) checked against theirs: within
    max(30 %, 75 ms) and max(15 %, 100 ms) (the client also pays HTTP, SSE and the network; +36 ms TTFT measured on
    a loaded 2-core host), plus ``client_lag_ms``."""
    lag = client_lag_ms or 0.0
    views, checks = [], []
    for name, client, metric, rel, abs_ms in (
        ("ttft_mean_ms", client_ttft, "vllm:time_to_first_token_seconds", 0.30, 75.0),
        ("e2e_mean_ms", client_e2e, "vllm:e2e_request_latency_seconds", 0.15, 100.0),
    ):
        view = latency_view(before, after, metric)
        server = view.mean_ms
        agrees = None
        if client is not None and server is not None:
            agrees = abs(client - server) <= max(rel * abs(server), abs_ms) + lag
        label = f"max({rel:.0%}, {abs_ms:.0f} ms)" + (f" + client lag {lag:.1f} ms" if lag else "")
        views.append(view)
        checks.append(_check(name, client, server, agrees, label))
    return views[0], views[1], checks


def server_counts(before: Samples, after: Samples) -> dict[str, Any]:
    """vLLM's counts over the window: ``requests_succeeded``/``_aborted``/``_errored``, ``prompt_tokens``,
    ``generation_tokens`` and ``preemptions`` (None: not scraped)."""

    def finished(*reasons: str) -> int:
        return round(sum(delta(before, after, "vllm:request_success_total", finished_reason=r) for r in reasons))

    return {
        "requests_succeeded": finished(*SUCCESS_REASONS),
        "requests_aborted": finished("abort"),
        "requests_errored": finished("error"),
        "prompt_tokens": round(delta(before, after, "vllm:prompt_tokens_total")),
        "generation_tokens": round(delta(before, after, "vllm:generation_tokens_total")),
        "preemptions": max(0, round(delta(before, after, PREEMPTIONS))) if PREEMPTIONS in after else None,
    }


def _client_latencies(records: Sequence[RequestRecord]) -> dict[str, list[float]]:
    """The client's TTFT, ITL and E2E over the rows vLLM's histograms hold: TTFT and ITL of every measured row that
    got them (failed or cut after the first token too), E2E of successful rows."""
    measured = [r for r in records if r.phase == "measured"]
    return {
        "ttft": [r.ttft_ms for r in measured if r.ttft_ms is not None],
        "itl": [gap for r in measured for gap in r.itl_ms],
        "e2e": [r.e2e_ms for r in measured if r.ok and r.e2e_ms is not None],
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

    Counts exact; mean TTFT and E2E by :func:`mean_checks`. With cut requests (:data:`CUT_KINDS`) counts may exceed
    the client's by what they could add (``explained``)."""
    ok = [r for r in records if r.phase == "measured" and r.ok]
    cut = [r for r in records if r.phase == "measured" and not r.ok and r.error_kind in CUT_KINDS]
    asked = [r.max_tokens for r in cut]
    bounds = {  # the most the server can have counted for cut requests beyond the client (unknown: no bound)
        "requests_succeeded": float(len(cut)),
        "generation_tokens": math.inf if None in asked else float(sum(a or 0 for a in asked)),
        "prompt_tokens": math.inf,
    }
    counts = server_counts(before, after)
    client = _client_latencies(records)
    ttft, e2e, latency_checks = mean_checks(before, after, _mean(client["ttft"]), _mean(client["e2e"]), client_lag_ms)
    usage_known = all(r.output_tokens is not None for r in ok)

    def exact(name: str, client: float | None) -> Agreement:
        server = float(counts[name])
        if not cut:
            return _check(name, client, server, None if client is None else client == server, "exact")
        extra = bounds[name]  # client <= server <= client + extra: the server also counted the cut requests' work
        label = f"exact, plus up to {len(cut)} cut request(s)" + ("" if math.isinf(extra) else f" (<= +{extra:.0f})")
        return _check(name, client, server, None if client is None else client <= server <= client + extra, label)

    client_output = float(sum(r.output_tokens or 0 for r in ok)) if usage_known else None
    client_prompt = float(sum(r.prompt_tokens or 0 for r in ok)) if usage_known else None
    checks = [
        exact("requests_succeeded", float(len(ok))),
        exact("generation_tokens", client_output),
        exact("prompt_tokens", client_prompt),
        *latency_checks,
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
    others = int(counts["requests_succeeded"]) - len(ok) - len(cut)  # answers to requests this run never sent
    if others > 0:
        disagreements.append(f"the server answered {others} request(s) this run did not send: another client used it "
                             "during the window, so the server's figures are not this run's alone")
    queries, hits, hit_rate = prefix_cache_delta(before, after)
    return ServerView(
        **counts,
        prefix_cache_queries=queries,
        prefix_cache_hits=hits,
        prefix_cache_hit_rate_percent=hit_rate,
        ttft=ttft,
        e2e=e2e,
        agreements=checks,
        disagreements=disagreements,
        requests_cut=len(cut),
        explained=explained,
        client_overhead=[client_overhead(before, after, records, server_url=server_url, max_added_pct=max_added_pct,
                                         others=others)],
    )


def prefix_cache_delta(before: Samples, after: Samples) -> tuple[int | None, int | None, float | None]:
    """``(queries, hits, hit rate %)`` of vLLM's prefix cache over the window; None where unknown."""
    if PREFIX_QUERIES not in after or PREFIX_HITS not in after:
        return None, None, None
    queries = max(0, round(delta(before, after, PREFIX_QUERIES)))
    hits = max(0, round(delta(before, after, PREFIX_HITS)))
    return queries, hits, (100.0 * hits / queries if queries else None)


def verdict_text(view: ServerView) -> str:
    """``agree``, ``agree (2 request(s) cut mid-stream account for ...)`` or ``DISAGREE: ...``."""
    if view.disagreements:
        return "DISAGREE: " + "; ".join(view.disagreements)
    if view.explained:
        return f"agree ({view.requests_cut} request(s) cut mid-stream account for the server's extra counts)"
    return "agree"


def client_overhead(
    before: Samples,
    after: Samples,
    records: Sequence[RequestRecord],
    *,
    server_url: str | None = None,
    max_added_pct: float = CLIENT_OVERHEAD_MAX_PCT,
    others: int = 0,
) -> ClientOverhead:
    """Client mean minus server mean of TTFT, ITL and E2E over one server's window.

    The client's means are over the rows the server's histograms hold (:func:`_client_latencies`); the server's are
    exact ``_sum``/``_count`` deltas. A figure is flagged above ``max_added_pct`` % and a floor (5 ms TTFT/E2E,
    0.5 ms ITL); ``missing`` says why nothing could be compared, e.g. ``others`` > 0 requests of another client in
    the server's figures."""
    if others > 0:
        return ClientOverhead(server_url=server_url, max_added_pct=max_added_pct,
                              missing=f"the server's means hold {others} request(s) of another client")  # fmt: skip
    client = _client_latencies(records)
    absent = [metric for _, metric, _ in ADDED_FIGURES if f"{metric}_count" not in after]
    if len(absent) == len(ADDED_FIGURES):
        why = "the server's /metrics has none of " + ", ".join(absent) + " (not vLLM, or a version without them)"
        return ClientOverhead(server_url=server_url, max_added_pct=max_added_pct, missing=why)
    figures, flagged = [], []
    for name, metric, floor_ms in ADDED_FIGURES:
        if metric in absent:
            continue
        client_ms = _mean(client[name])
        server_ms = latency_view(before, after, metric).mean_ms
        added = None if client_ms is None or server_ms is None else client_ms - server_ms
        share = _pct(client_ms, server_ms)
        figures.append(
            AddedLatency(
                name=name, client_mean_ms=client_ms, server_mean_ms=server_ms, added_ms=added, added_percent=share
            )
        )
        if added is not None and share is not None and share > max_added_pct and added > floor_ms:
            flagged.append(name)
    missing = None
    if all(f.added_ms is None for f in figures):
        ok = any(r.phase == "measured" and r.ok for r in records)
        missing = "no request of the window in the server's latency histograms" if ok else "no successful request"
    return ClientOverhead(
        server_url=server_url, figures=figures, max_added_pct=max_added_pct, flagged=flagged, missing=missing
    )


def overhead_text(overhead: ClientOverhead) -> str:
    """``TTFT +21.3 ms (+1.2%), ... over the server's own``, with the flag or why it is missing."""
    where = f" ({overhead.server_url})" if overhead.server_url else ""
    if overhead.missing:
        return f"client overhead not measured{where}: {overhead.missing}"
    parts = [
        f"{f.name.upper()} {f.added_ms:+.1f} ms ({f.added_percent:+.1f}%)"
        if f.added_ms is not None and f.added_percent is not None
        else f"{f.name.upper()} n/a"
        for f in overhead.figures
    ]
    text = ", ".join(parts) + f" over the server's own{where}"
    if overhead.flagged:
        names = ", ".join(n.upper() for n in overhead.flagged)
        text += f" — CLIENT OVERHEAD: adds more than {overhead.max_added_pct:g}% to {names} (CLIENT_OVERHEAD_MAX_PCT)"
    return text
