"""When a run was bound by vLLM's KV cache (pure): vLLM preempted requests, or the pool ran (nearly) full while
requests waited (vLLM 0.32 ``vllm/v1/core/sched/scheduler.py``).
"""

from __future__ import annotations

from core.report_schema import KvCacheStats

KV_FULL_PERCENT = 95.0
"""Usage (% of the pool) from which a pool counts as full: one block of headroom is rarely free in practice."""


def kv_bound_reason(kv: KvCacheStats | None, preemptions: int | None) -> str | None:
    """Why the run was KV-bound, in one clause; None when not.

    Args:
        kv: the window's KV statistics, or None.
        preemptions: the ``vllm:num_preemptions_total`` delta, or None.
    """
    peak = kv.usage_peak_percent if kv is not None else None
    waiting = kv.requests_waiting_peak if kv is not None else None
    pool = f" of {kv.pool_tokens:,} tokens" if kv is not None and kv.pool_tokens else ""
    if preemptions:
        at = f" (KV cache peak {peak:.0f}%{pool})" if peak is not None else ""
        return f"vLLM preempted {preemptions} request(s): the KV cache ran out{at}"
    if peak is not None and peak >= KV_FULL_PERCENT and waiting:
        return f"KV cache {peak:.0f}% full{pool} with up to {waiting} request(s) waiting"
    return None
