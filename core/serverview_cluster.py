"""The server cross-check of a cluster: every engine behind vLLM's router, scraped before and after the window.

The sum is :func:`core.serverview.cross_check` of the added scrapes; per replica: share, counts, mean TTFT/E2E against
the client's means, client overhead, KV pool, peak and preemptions; an unscraped replica is ``down``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from core.records import RequestRecord
from core.records import mean_or_none as _mean
from core.replicas import imbalance_percent, shares_percent
from core.serverview import CLIENT_OVERHEAD_MAX_PCT, ClientOverhead, client_overhead, mean_checks, server_counts
from core.serverview_samples import Samples, bucket_counts

CACHE_INFO = "vllm:cache_config_info"
PROMPT_TOKENS = "vllm:request_prompt_tokens"


@dataclass
class ReplicaScrapes:
    """One engine's scrapes around the window (None: ``why``), peak KV usage %, and if it always answered."""

    name: str
    url: str
    before: Samples | None
    after: Samples | None
    why: str | None = None
    kv_peak_percent: float | None = None
    down_since_s: float | None = None  # seconds into the window when a poll first failed


class ReplicaView(BaseModel):
    """One engine of the cluster over the measured window (its own ``/metrics``)."""

    name: str = Field(description="vllm (local replica 0), vllm-K, or remote-K (ENGINE_URLS).")
    url: str
    state: str = Field(description="up: scraped before and after; down: not at the end (see down_reason).")
    down_reason: str | None = None
    down_after_s: float | None = Field(default=None, description="When polls first failed, s into the window.")
    requests_succeeded: int | None = Field(default=None, description="vllm:request_success_total (finished) delta.")
    requests_failed: int | None = Field(default=None, description="Aborted and errored requests (server's counts).")
    share_percent: float | None = Field(default=None, description="Its share of the requests the replicas finished.")
    prompt_tokens: int | None = None
    generation_tokens: int | None = None
    ttft_mean_ms: float | None = Field(default=None, description="Server's mean TTFT over the window, ms.")
    e2e_mean_ms: float | None = Field(default=None, description="Server's mean E2E over the window, ms.")
    agrees: bool | None = Field(
        default=None,
        description="Its mean TTFT and E2E within the cross-check's tolerances of the client's means (the client's "
        "mean event-loop lag included).",
    )
    client_ttft_mean_ms: float | None = Field(
        default=None,
        description="The client's mean TTFT it is compared with, ms: over the client's rows weighted to this "
        "replica's prompt lengths (its vllm:request_prompt_tokens buckets); over all rows without that histogram.",
    )
    client_e2e_mean_ms: float | None = Field(default=None, description="The same for E2E, ms.")
    client_overhead: ClientOverhead | None = None
    kv_pool_tokens: int | None = Field(default=None, description="Tokens its KV pool holds (cache_config_info).")
    kv_peak_usage_percent: float | None = Field(default=None, description="Highest KV usage polled during the run.")
    preemptions: int | None = None


class ClusterView(BaseModel):
    """Every engine behind the router over the window: per-replica figures, the spread and who went down."""

    router_policy: str | None = Field(default=None, description="ROUTER_POLICY (None: the router's default).")
    router_version: str | None = Field(default=None, description="The vllm-router package's version.")
    replicas: list[ReplicaView]
    imbalance_percent: float | None = Field(
        default=None,
        description="(busiest replica's requests / mean per replica - 1) x 100; 0: even. None: a replica not scraped.",
    )
    down: list[str] = Field(default_factory=list, description="Replicas that were down at the end of the run.")
    note: str | None = Field(default=None, description="Why the summed counts could not be checked exactly.")


def kv_pool_tokens(samples: Samples) -> int | None:
    """Tokens the KV pool holds (``vllm:cache_config_info``); None when absent."""
    for labels in samples.get(CACHE_INFO, {}):
        info = dict(labels)
        try:
            tokens = int(float(info.get("kv_cache_size_tokens") or 0))
            if not tokens:
                tokens = int(float(info.get("num_gpu_blocks") or 0)) * int(float(info.get("block_size") or 0))
        except ValueError:
            return None
        return tokens or None
    return None


def matched_means(before: Samples, after: Samples, rows: Sequence[RequestRecord]) -> tuple[float | None, float | None]:
    """The client's mean TTFT and E2E (ms) weighted to one replica's requests per prompt-length bucket
    (``vllm:request_prompt_tokens``); the plain means when that cannot be done."""
    plain = (_mean([r.ttft_ms for r in rows if r.ttft_ms is not None]),
             _mean([r.e2e_ms for r in rows if r.e2e_ms is not None]))  # fmt: skip
    buckets = bucket_counts(before, after, PROMPT_TOKENS)
    served = [(le, count) for le, count in buckets if count > 0]
    if not served or any(r.prompt_tokens is None for r in rows):
        return plain
    bounds = [le for le, _ in buckets]
    groups: dict[float, list[RequestRecord]] = {le: [] for le in bounds}
    for row in rows:
        le = next((b for b in bounds if (row.prompt_tokens or 0) <= b), None)
        if le is not None:
            groups[le].append(row)
    means = []
    for field in ("ttft_ms", "e2e_ms"):
        weighted = [(count, _mean([v for r in groups[le] if (v := getattr(r, field)) is not None]))
                    for le, count in served]  # fmt: skip
        if any(m is None for _, m in weighted):
            return plain
        means.append(sum(c * (m or 0.0) for c, m in weighted) / sum(c for c, _ in weighted))
    return means[0], means[1]


def replica_view(
    scrapes: ReplicaScrapes,
    records: Sequence[RequestRecord],
    max_added_pct: float = CLIENT_OVERHEAD_MAX_PCT,
    client_lag_ms: float | None = None,
) -> ReplicaView:
    """One replica's figures over the window, its means checked against :func:`matched_means`."""
    base: dict[str, Any] = {"name": scrapes.name, "url": scrapes.url, "kv_peak_usage_percent": scrapes.kv_peak_percent,
            "down_after_s": scrapes.down_since_s}  # fmt: skip
    before, after = scrapes.before, scrapes.after
    if before is None or after is None:
        return ReplicaView(**base, state="down", down_reason=scrapes.why or "not scraped")
    ok = [r for r in records if r.phase == "measured" and r.ok]
    client_ttft, client_e2e = matched_means(before, after, ok)
    ttft, e2e, checks = mean_checks(before, after, client_ttft, client_e2e, client_lag_ms)
    known = [c.agrees for c in checks if c.agrees is not None]
    counts = server_counts(before, after)
    return ReplicaView(
        **base,
        state="up" if scrapes.down_since_s is None else "down",
        down_reason=None if scrapes.down_since_s is None else "stopped answering during the run, back at the end",
        **{name: counts[name] for name in ("requests_succeeded", "prompt_tokens", "generation_tokens", "preemptions")},
        requests_failed=counts["requests_aborted"] + counts["requests_errored"],
        ttft_mean_ms=ttft.mean_ms,
        e2e_mean_ms=e2e.mean_ms,
        agrees=all(known) if known else None,
        client_ttft_mean_ms=client_ttft,
        client_e2e_mean_ms=client_e2e,
        client_overhead=client_overhead(before, after, records, server_url=scrapes.url, max_added_pct=max_added_pct),
        kv_pool_tokens=kv_pool_tokens(after),
    )


def cluster_view(
    scrapes: Sequence[ReplicaScrapes],
    records: Sequence[RequestRecord],
    *,
    router_policy: str | None = None,
    router_version: str | None = None,
    max_added_pct: float = CLIENT_OVERHEAD_MAX_PCT,
    client_lag_ms: float | None = None,
) -> ClusterView:
    """Every replica's view, their shares and imbalance, the replicas down, and a note when the sum lacks one."""
    views = [replica_view(s, records, max_added_pct, client_lag_ms) for s in scrapes]
    counted = [v for v in views if v.requests_succeeded is not None]
    for view, share in zip(counted, shares_percent([v.requests_succeeded or 0 for v in counted]), strict=True):
        view.share_percent = share
    down = [v.name for v in views if v.state == "down"]
    unscraped = [v.name for v in views if v.requests_succeeded is None]
    note = None
    if unscraped:
        note = (f"{', '.join(unscraped)} could not be scraped at the end: the servers' counts lack "
                f"{'its' if len(unscraped) == 1 else 'their'} requests, so the summed cross-check was skipped")
    return ClusterView(
        router_policy=router_policy,
        router_version=router_version,
        replicas=views,
        imbalance_percent=None if unscraped else imbalance_percent([v.requests_succeeded or 0 for v in counted]),
        down=down,
        note=note,
    )
