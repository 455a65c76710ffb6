"""Server cross-check: vLLM's own ``/metrics`` before and after the measured window, beside the client's view.

Counters are differenced between the two scrapes; latency quantiles come from the histogram bucket deltas,
interpolated linearly inside a bucket as Prometheus' ``histogram_quantile`` does; means are exact (``_sum`` /
``_count`` deltas). Client and server should agree: request and token counts exactly (unless other traffic hit the
server during the run), mean TTFT and E2E within a tolerance (the client also pays HTTP, SSE and network time).
What the client added to the server's own clock (mean TTFT, ITL and E2E, client minus server) is
:func:`client_overhead`, a function of one server's two scrapes (so it can be given per replica).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, Field

from core.records import RequestRecord

SUCCESS_REASONS = {"stop", "length", "repetition"}
# Failures where the client gave up on a stream the server had accepted: the server may have generated (and counted)
# tokens, or even finished the request, that the client never saw. Ctrl-C and DRAIN_S cut requests are `incomplete`.
CUT_KINDS = frozenset({"incomplete", "timeout", "connection", "no_done"})
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def parse_exposition(text: str) -> Samples:
    """``{sample name: {labels: value}}`` of a Prometheus text exposition (vLLM's ``/metrics``).

    Raises:
        ValueError: the text is not a Prometheus exposition.
    """
    out: Samples = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name][tuple(sorted(sample.labels.items()))] = float(sample.value)
    return dict(out)


def _total(samples: Samples, name: str, **match: str) -> float:
    """Sum of ``name`` over the label sets that contain ``match``."""
    return sum(
        value
        for labels, value in samples.get(name, {}).items()
        if all(dict(labels).get(k) == v for k, v in match.items())
    )


def _delta(before: Samples, after: Samples, name: str, **match: str) -> float:
    return _total(after, name, **match) - _total(before, name, **match)


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Quantile ``q`` (0..1) from cumulative ``(upper bound, count)`` buckets, as Prometheus computes it.

    Linear interpolation inside the bucket holding the rank; the +Inf bucket returns the previous bound.
    Source: Prometheus docs, "histogram_quantile()". None when the histogram is empty.
    """
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return ordered[-1][0]


def _bucket_deltas(before: Samples, after: Samples, name: str) -> list[tuple[float, float]]:
    per_le: dict[float, float] = defaultdict(float)
    for source, sign in ((after, 1.0), (before, -1.0)):
        for labels, value in source.get(f"{name}_bucket", {}).items():
            le = dict(labels).get("le")
            if le is not None:
                per_le[float(le)] += sign * value
    return sorted(per_le.items())


class LatencyView(BaseModel):
    """One server-side latency histogram over the window, milliseconds."""

    count: int
    mean_ms: float | None
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None


def latency_view(before: Samples, after: Samples, name: str) -> LatencyView:
    """Count, exact mean and bucket-interpolated quantiles of histogram ``name`` (seconds) over the window."""
    count = _delta(before, after, f"{name}_count")
    total_s = _delta(before, after, f"{name}_sum")
    buckets = _bucket_deltas(before, after, name)

    def q_ms(q: float) -> float | None:
        value = histogram_quantile(q, buckets)
        return None if value is None else value * 1000.0

    return LatencyView(
        count=round(count),
        mean_ms=total_s / count * 1000.0 if count > 0 else None,
        p50_ms=q_ms(0.5),
        p90_ms=q_ms(0.9),
        p99_ms=q_ms(0.99),
    )


class Agreement(BaseModel):
    """Client vs server for one quantity."""

    name: str
    client: float | None
    server: float | None
    diff_percent: float | None
    tolerance: str
    agrees: bool | None = Field(description="None when either side is missing.")


ADDED_FIGURES = (  # (name, vLLM histogram, the least added ms ever flagged: below it a share means nothing)
    ("ttft", "vllm:time_to_first_token_seconds", 5.0),
    ("itl", "vllm:inter_token_latency_seconds", 0.5),
    ("e2e", "vllm:e2e_request_latency_seconds", 5.0),
)
CLIENT_OVERHEAD_MAX_PCT = 10.0  # default of the CLIENT_OVERHEAD_MAX_PCT setting


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


def client_overhead(
    before: Samples,
    after: Samples,
    records: Sequence[RequestRecord],
    *,
    server_url: str | None = None,
    max_added_pct: float = CLIENT_OVERHEAD_MAX_PCT,
) -> ClientOverhead:
    """Client mean minus server mean of TTFT, ITL and E2E over one server's window (``after - before``).

    The client's means are over its successful measured rows (ITL: every gap of every row pooled, as the server's
    histogram pools every token's gap); the server's are exact (``_sum``/``_count`` deltas of
    ``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds``, ``vllm:e2e_request_latency_seconds``;
    vLLM v1 stamps them in its API server's output processor, so the difference is HTTP, SSE, parsing, the network
    and the client's own scheduling). A figure is flagged when the client added more than ``max_added_pct`` % of
    the server's figure and more than a floor (5 ms TTFT/E2E, 0.5 ms ITL). ``missing`` says why nothing could be
    compared: no such histogram (not vLLM, or another version) or none of it in the window.
    """
    ok = [r for r in records if r.phase == "measured" and r.ok]
    client = {
        "ttft": [r.ttft_ms for r in ok if r.ttft_ms is not None],
        "itl": [gap for r in ok for gap in r.itl_ms],
        "e2e": [r.e2e_ms for r in ok if r.e2e_ms is not None],
    }
    absent = [metric for _, metric, _ in ADDED_FIGURES if f"{metric}_count" not in after]
    if len(absent) == len(ADDED_FIGURES):
        why = "the server's /metrics has none of " + ", ".join(absent) + " (not vLLM, or a version without them)"
        return ClientOverhead(server_url=server_url, max_added_pct=max_added_pct, missing=why)
    figures, flagged = [], []
    for name, metric, floor_ms in ADDED_FIGURES:
        if metric in absent:
            continue
        values = client[name]
        client_ms = sum(values) / len(values) if values else None
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
        missing = "no request of the window in the server's latency histograms" if ok else "no successful request"
    return ClientOverhead(
        server_url=server_url, figures=figures, max_added_pct=max_added_pct, flagged=flagged, missing=missing
    )


def overhead_text(overhead: ClientOverhead) -> str:
    """``TTFT +21.3 ms (+1.2%), ITL +0.4 ms (+0.5%), E2E +45.0 ms (+0.9%) over the server's own``, with the flag or
    why it is missing — the one wording for the terminal, Markdown and HTML."""
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


def _check(name: str, client: float | None, server: float | None, rel: float, abs_: float, label: str) -> Agreement:
    agrees = None
    if client is not None and server is not None:
        agrees = abs(client - server) <= max(rel * abs(server), abs_)
    return Agreement(
        name=name, client=client, server=server, diff_percent=_pct(client, server), tolerance=label, agrees=agrees
    )


def _within(name: str, client: float | None, server: float, extra: float, cut: int) -> Agreement:
    """``client <= server <= client + extra``: the server also counted the work of ``cut`` requests the client cut
    mid-stream (``extra`` may be infinite: no upper bound known)."""
    agrees = None if client is None else client <= server <= client + extra
    label = f"exact, plus up to {cut} cut request(s)" + ("" if math.isinf(extra) else f" (<= +{extra:.0f})")
    return Agreement(
        name=name, client=client, server=server, diff_percent=_pct(client, server), tolerance=label, agrees=agrees
    )


def _cut_bounds(cut: Sequence[RequestRecord]) -> dict[str, float]:
    """The most the server can have counted for the cut requests beyond what the client did: each may have finished
    on the server, generated up to its ``max_tokens`` and had its whole prompt prefilled (unknown: no bound)."""
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
) -> ServerView:
    """Compare the server's window (``after - before``) with the client's measured rows.

    Tolerances: request and token counts exact; mean TTFT within max(30 %, 75 ms) and mean E2E within
    max(15 %, 100 ms) — the client's clock also covers HTTP, chat templating, tokenisation, SSE parsing and the
    network, the server's histograms do not (measured here: +36 ms TTFT with the tiny model on a loaded 2-core host).
    Requests the client cut mid-stream (:data:`CUT_KINDS`: Ctrl-C, drain, timeouts) were partly or wholly served:
    with any, the counts must lie between the client's and the client's plus what those requests could add, and the
    difference is listed as ``explained``, not as a disagreement. ``client_overhead`` holds
    :func:`client_overhead` of the window (``server_url``, ``max_added_pct`` passed on).
    """
    ok = [r for r in records if r.phase == "measured" and r.ok]
    cut = [r for r in records if r.phase == "measured" and not r.ok and r.error_kind in CUT_KINDS]
    bounds = _cut_bounds(cut)
    ttft = latency_view(before, after, "vllm:time_to_first_token_seconds")
    e2e = latency_view(before, after, "vllm:e2e_request_latency_seconds")
    succeeded = sum(_delta(before, after, "vllm:request_success_total", finished_reason=r) for r in SUCCESS_REASONS)
    client_ttft = [r.ttft_ms for r in ok if r.ttft_ms is not None]
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
        _check(
            "ttft_mean_ms",
            sum(client_ttft) / len(client_ttft) if client_ttft else None,
            ttft.mean_ms,
            0.30,
            75.0,
            "max(30%, 75 ms)",
        ),
        _check(
            "e2e_mean_ms",
            sum(client_e2e) / len(client_e2e) if client_e2e else None,
            e2e.mean_ms,
            0.15,
            100.0,
            "max(15%, 100 ms)",
        ),
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
    """``(queries, hits, hit rate %)`` of vLLM's prefix cache over the window, from the counters' deltas (tokens);
    all None when the server has no such counters (prefix caching off, another server); the rate is None when
    nothing was queried."""
    if PREFIX_QUERIES not in after or PREFIX_HITS not in after:
        return None, None, None
    queries = max(0, round(_delta(before, after, PREFIX_QUERIES)))
    hits = max(0, round(_delta(before, after, PREFIX_HITS)))
    return queries, hits, (100.0 * hits / queries if queries else None)


def verdict_text(view: ServerView) -> str:
    """``agree``, ``agree (2 request(s) cut mid-stream account for …)`` or ``DISAGREE: …`` — the one wording of
    the cross-check's verdict for the terminal, Markdown and HTML."""
    if view.disagreements:
        return "DISAGREE: " + "; ".join(view.disagreements)
    if view.explained:
        return f"agree ({view.requests_cut} request(s) cut mid-stream account for the server's extra counts)"
    return "agree"
