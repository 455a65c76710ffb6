"""Turn what the load generator collected into a :class:`Report`: metrics, resources, logs, environment."""

from __future__ import annotations

from core.api import BuildReportRequest
from core.cost import CostBasis, report_figures
from core.energy import NO_ENERGY_GAP
from core.fingerprint import workload_fingerprint
from core.records import RequestRecord
from core.redact import strip_url_credentials
from core.report_resources import kv_bound_reason
from core.report_schema import Environment, HostResources, LogFacts, Metrics, Report, Resources, error_summary
from core.stats import RunMetrics, key_insight
from sidecar.sampling.resources import WindowPeaks


def build_metrics(
    run: RunMetrics, resources: Resources, preemptions: int | None = None, cost: CostBasis | None = None
) -> Metrics:
    """The report's metrics: the run's, their flat names, memory peaks, KV pool and verdict, energy and cost."""
    kv = resources.kv_cache
    return Metrics(
        **run.model_dump(),
        latency_avg_ms=run.e2e.mean_ms,
        latency_p50_ms=run.e2e.p50_ms,
        latency_p90_ms=run.e2e.p90_ms,
        latency_p99_ms=run.e2e.p99_ms,
        ttft_p50_ms=run.ttft.p50_ms,
        ttft_p99_ms=run.ttft.p99_ms,
        gpu_mem_peak_gb=resources.gpu_mem_peak_gb,
        vllm_rss_peak_gb=resources.vllm_rss_peak_gb,
        kv_cache_gb=kv.pool_gb if kv else None,
        kv_cache_usage_peak_percent=kv.usage_peak_percent if kv else None,
        kv_bound=kv_bound_reason(kv, preemptions),
        key_insight=key_insight(run),
    ).model_copy(update=report_figures(run, resources.energy, cost))


def build_resources(
    peaks: WindowPeaks,
    gpu_unavailable_reason: str | None,
    cpu_unavailable_reason: str | None,
    sample_interval_s: float | None = None,
    gpu_memory_api: str | None = None,
) -> Resources:
    """The report's ``resources`` section from the window's peaks, per-GPU statistics and time series."""
    return Resources(
        gpu_unavailable_reason=gpu_unavailable_reason,
        gpu_memory_api=gpu_memory_api if peaks.gpu_mem_peak_gb is not None else None,
        gpu_mem_peak_gb=peaks.gpu_mem_peak_gb,
        gpu_samples=peaks.samples if peaks.gpu_mem_peak_gb is not None else 0,
        gpus=list(peaks.gpus),
        vllm_rss_peak_gb=peaks.vllm_rss_peak_gb,
        cpu_unavailable_reason=cpu_unavailable_reason if peaks.vllm_rss_peak_gb is None else None,
        vllm_cpu_percent_peak=peaks.vllm_cpu_percent_peak,
        vllm_cpu_percent_mean=peaks.vllm_cpu_percent_mean,
        host_mem_used_peak_gb=peaks.host_used_peak_gb,
        kv_cache=peaks.kv_cache,
        sample_interval_s=sample_interval_s,
        timeline=list(peaks.timeline),
    )


def host_entry(resources: Resources, host: str) -> HostResources:
    """One host's GPU memory (``resources.hosts`` entry) from its ``resources`` section: peak, per GPU, why none."""
    return HostResources(
        host=host,
        gpu_mem_peak_gb=resources.gpu_mem_peak_gb,
        gpus=list(resources.gpus),
        gpu_samples=resources.gpu_samples,
        gpu_memory_api=resources.gpu_memory_api,
        gpu_unavailable_reason=resources.gpu_unavailable_reason,
        energy=resources.energy,
    )


def host_gaps(resources: Resources) -> list[str]:
    """Gap lines for the hosts of ``resources.hosts`` whose sidecar gave no figures (PEER_SIDECARS), with why."""
    return [f"GPU memory of host {h.host} ({h.url}) missing: {h.unavailable_reason}"
            for h in resources.hosts if h.unavailable_reason]  # fmt: skip


def energy_gaps(resources: Resources, cost: CostBasis | None) -> list[str]:
    """Why the run has no energy figure, and why a price given gave no cost (docs/energy.md)."""
    energy = resources.energy
    gaps = [f"{NO_ENERGY_GAP}{energy.unavailable_reason}"] if energy and energy.energy_j is None else []
    if cost and cost.unavailable_reason:
        gaps.append(f"no hardware cost: {cost.unavailable_reason}")
    if cost and cost.energy_price_usd_per_kwh is not None and (energy is None or energy.energy_j is None):
        gaps.append("no energy cost: ENERGY_PRICE_PER_KWH is set, but the energy was not measured")
    return gaps


def environment_gaps(environment: Environment) -> list[str]:
    """What the environment could not tell (e.g. a server without ``/version``)."""
    if environment.vllm_version is None:
        return ["server version unknown: GET /version did not answer and logs/vllm.log has no version line"]
    return []


def build_report(
    request: BuildReportRequest,
    records: list[RequestRecord],
    *,
    report_id: str,
    timestamp: str,
    environment: Environment,
    resources: Resources,
    log_facts: LogFacts,
    cost: CostBasis | None = None,
) -> Report:
    """Assemble a report from what the caller gathered (pure; ``cost`` None when unpriced); no comparisons yet."""
    return Report(
        report_id=report_id,
        timestamp=timestamp,
        run_started_at=request.window_start,
        run_ended_at=request.window_end,
        environment=environment,
        config=request.config.model_copy(update={"vllm_url": strip_url_credentials(request.config.vllm_url)}),
        metrics=build_metrics(
            request.metrics, resources, request.server.preemptions if request.server else None, cost
        ),
        errors=request.errors if request.errors is not None else error_summary(records),
        resources=resources,
        logs=log_facts,
        fingerprint=workload_fingerprint(request.config, environment),
        server=request.server,
        cluster=request.cluster,
        client=request.client,
        cost=cost,
        interrupted=request.interrupted,
        server_down=request.server_down,
        engine_switch=request.engine_switch,
        gaps=[*request.gaps, *environment_gaps(environment), *host_gaps(resources), *energy_gaps(resources, cost)],
        requests_file="",
    )
