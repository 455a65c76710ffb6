"""A report's resources, what its run used: NVML and psutil samples over the run window, per-GPU peaks and means,
the timeline and vLLM's KV cache (and whether it bound the run: vLLM preempted requests, or the pool ran (nearly)
full while requests waited, vLLM 0.32 ``vllm/v1/core/sched/scheduler.py``); :class:`core.report_schema.Report` holds
them."""

from __future__ import annotations

from pydantic import BaseModel, Field

from core.energy import EnergyStats


class GpuSample(BaseModel):
    """One NVML reading of one GPU."""

    t: float = Field(description="Unix time, s.")
    index: int
    mem_used_gb: float = Field(description="Memory used, GiB, as nvidia-smi shows it (NVML v2: without reserved).")
    mem_total_gb: float = Field(description="Memory of the device, GiB.")
    mem_reserved_gb: float | None = Field(
        default=None, description="Driver-reserved memory, GiB (NVML v2 only; v1 counts it as used)."
    )
    util_percent: float | None = None
    power_w: float | None = None
    energy_mj: float | None = Field(
        default=None,
        description="NVML's total-energy counter: mJ since the driver loaded (Volta and later; None without it).",
    )
    other_mem_gb: float | None = Field(
        default=None,
        description="Memory held on this GPU by processes that are not the engine's, GiB (NVML's process list); "
        "None when NVML cannot tell (no process list, or the engine in another pid namespace).",
    )


class GpuStats(BaseModel):
    """One GPU over the run window: peaks are maxima of the samples (NVML keeps no device-level peak)."""

    index: int
    name: str | None = None
    mem_total_gb: float | None = None
    mem_used_peak_gb: float | None = None
    util_percent_peak: float | None = None
    util_percent_mean: float | None = None
    power_w_peak: float | None = None
    power_w_mean: float | None = None
    uuid: str | None = Field(default=None, description="NVML's UUID of the device (GPU-…).")
    other_mem_peak_gb: float | None = Field(
        default=None, description="Peak memory of processes not the engine's on this GPU, GiB (see GpuSample)."
    )


class ResourcePoint(BaseModel):
    """One sample of the run window's time series (None where not measured)."""

    t_s: float = Field(description="Seconds since the window start.")
    gpu_mem_used_gb: float | None = Field(default=None, description="Summed over GPUs.")
    vllm_rss_gb: float | None = None
    vllm_cpu_percent: float | None = Field(default=None, description="Summed over the vLLM process tree, % of a core.")
    host_mem_used_gb: float | None = None
    kv_cache_usage_percent: float | None = Field(default=None, description="vLLM's KV cache usage, % of the pool.")
    requests_running: float | None = Field(default=None, description="Requests in vLLM's running batch.")
    requests_waiting: float | None = Field(default=None, description="Requests queued in vLLM.")


class KvCacheStats(BaseModel):
    """vLLM's KV cache pool and how full it got over the run window, from its ``/metrics`` (sampled by the sidecar
    every ``ENGINE_METRICS_INTERVAL_S``): the pool from ``vllm:cache_config_info``, usage from
    ``vllm:kv_cache_usage_perc``, queue from ``vllm:num_requests_running`` / ``vllm:num_requests_waiting``."""

    pool_gb: float | None = Field(default=None, description="Pool size, GiB (vLLM's kv_cache_memory_bytes).")
    pool_blocks: int | None = Field(default=None, description="Blocks in the pool (num_gpu_blocks, also on CPU).")
    block_size_tokens: int | None = None
    pool_tokens: int | None = Field(default=None, description="Tokens the pool holds: blocks × block size.")
    usage_peak_percent: float | None = None
    usage_mean_percent: float | None = None
    requests_running_peak: int | None = None
    requests_waiting_peak: int | None = None
    samples: int = 0
    unavailable_reason: str | None = Field(default=None, description="Why nothing was sampled (vLLM unreachable).")


KV_FULL_PERCENT = 95.0
"""Usage (% of the pool) from which a pool counts as full: one block of headroom is rarely free in practice."""


def kv_bound_reason(kv: KvCacheStats | None, preemptions: int | None) -> str | None:
    """Why the run was KV-bound, in one clause, from the window's KV statistics and the ``vllm:num_preemptions_total``
    delta (either None: not known); None when not."""
    peak = kv.usage_peak_percent if kv is not None else None
    waiting = kv.requests_waiting_peak if kv is not None else None
    pool = f" of {kv.pool_tokens:,} tokens" if kv is not None and kv.pool_tokens else ""
    if preemptions:
        at = f" (KV cache peak {peak:.0f}%{pool})" if peak is not None else ""
        return f"vLLM preempted {preemptions} request(s): the KV cache ran out{at}"
    if peak is not None and peak >= KV_FULL_PERCENT and waiting:
        return f"KV cache {peak:.0f}% full{pool} with up to {waiting} request(s) waiting"
    return None


class HostResources(BaseModel):
    """GPU memory of one host over the run window, from its own sidecar: the coordinating sidecar's (``url`` None)
    and each of PEER_SIDECARS. A peer that could not be asked has ``unavailable_reason`` and no figures."""

    host: str = Field(description="The host's name as its sidecar reports it (LOAD_HOST_NAME, else its hostname).")
    url: str | None = Field(default=None, description="The peer sidecar asked; None for the coordinating sidecar.")
    gpu_mem_peak_gb: float | None = Field(default=None, description="Peak of the host's summed GPU memory used, GiB.")
    gpus: list[GpuStats] = Field(default_factory=list, description="Per-GPU peaks and means (NVML index).")
    gpu_samples: int = 0
    gpu_memory_api: str | None = None
    gpu_unavailable_reason: str | None = Field(default=None, description="Why the host's sidecar has no NVML.")
    unavailable_reason: str | None = Field(
        default=None, description="Why the peer sidecar gave no figures (unreachable, refused, bad answer)."
    )
    energy: EnergyStats | None = Field(default=None, description="The host's energy over the window (docs/energy.md).")


class Resources(BaseModel):
    """Resource use over the run window."""

    gpu_unavailable_reason: str | None = None
    gpu_memory_api: str | None = Field(
        default=None,
        description="How GPU memory was read: nvml_v2 (used excludes driver-reserved memory, as nvidia-smi) or "
        "nvml_v1 (older drivers: used includes it).",
    )
    gpu_mem_peak_gb: float | None = Field(default=None, description="Peak of the summed GPU memory used, GiB.")
    gpu_samples: int = 0
    gpus: list[GpuStats] = Field(default_factory=list, description="Per-GPU peaks and means; empty without NVML.")
    vllm_rss_peak_gb: float | None = Field(default=None, description="Peak RSS of the vLLM process tree, GiB.")
    cpu_unavailable_reason: str | None = None
    vllm_cpu_percent_peak: float | None = Field(
        default=None, description="vLLM process tree CPU use, % of one core summed over processes (may exceed 100)."
    )
    vllm_cpu_percent_mean: float | None = None
    host_mem_used_peak_gb: float | None = Field(default=None, description="Peak host memory in use, GiB.")
    kv_cache: KvCacheStats | None = Field(default=None, description="vLLM's KV cache over the window (its /metrics).")
    sample_interval_s: float | None = None
    timeline: list[ResourcePoint] = Field(
        default_factory=list, description="Samples of the window, thinned to at most a few hundred points."
    )
    energy: EnergyStats | None = Field(
        default=None,
        description="Energy of the engine's GPUs (NVML), else of the host's CPU packages (RAPL), over the measured "
        "window, with the idle power before the run; None in reports written before it existed (docs/energy.md).",
    )
    hosts: list[HostResources] = Field(
        default_factory=list,
        description="GPU memory per host, the coordinating sidecar's first, then each of PEER_SIDECARS (empty "
        "without peers: the figures above are this host's).",
    )
