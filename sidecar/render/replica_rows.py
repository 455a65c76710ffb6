"""The per-replica table of a report with engines behind vLLM's router (``report.cluster``), for Markdown and HTML."""

from __future__ import annotations

from core.serverview_cluster import ClusterView
from sidecar.render.view_rows import fmt

REPLICA_HEADER = ["replica", "state", "requests", "share", "failed", "TTFT ms (server)", "E2E ms (server)", "agrees",
                  "client adds TTFT ms", "KV pool tokens", "KV peak %", "preemptions"]  # fmt: skip
"""Columns of :func:`replica_rows`."""


def replica_rows(cluster: ClusterView) -> list[list[str]]:
    """One row per engine: state, counts, share, server means, agreement, client TTFT overhead, KV pool, peak use."""
    rows = []
    for r in cluster.replicas:
        state = r.state if r.state == "up" else f"DOWN ({r.down_reason}" + (
            f"; polls failed from {r.down_after_s:g} s)" if r.down_after_s is not None else ")")
        added = next((f.added_ms for f in (r.client_overhead.figures if r.client_overhead else []) if f.name == "ttft"),
                     None)  # fmt: skip
        agrees = "-" if r.agrees is None else ("yes" if r.agrees else "NO")
        rows.append([f"{r.name} ({r.url})", state, fmt(r.requests_succeeded, digits=0),
                     fmt(r.share_percent, "%", 1), fmt(r.requests_failed, digits=0), fmt(r.ttft_mean_ms, digits=1),
                     fmt(r.e2e_mean_ms, digits=1), agrees, fmt(added, digits=1), fmt(r.kv_pool_tokens, digits=0),
                     fmt(r.kv_peak_usage_percent, digits=3), fmt(r.preemptions, digits=0)])  # fmt: skip
    return rows


def cluster_lines(cluster: ClusterView) -> list[str]:
    """The lines above the table: router policy and version, the imbalance, the replicas down, the summed note."""
    lines = [f"vllm-router {cluster.router_version or '(version unknown)'}, policy {cluster.router_policy or '?'}; "
             f"{len(cluster.replicas)} replicas; imbalance {fmt(cluster.imbalance_percent, '%', 1)} "
             "(busiest replica over an even share)"]  # fmt: skip
    if cluster.down:
        lines.append(f"DOWN at the end of the run: {', '.join(cluster.down)}")
    if cluster.note:
        lines.append(cluster.note)
    return lines
