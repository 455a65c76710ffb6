"""Turn what the load generator collected into a :class:`Report`: metrics, resources, the run's energy (over its
measured window, every host summed, per local replica) and cost (docs/energy.md), the ``logs`` section (vLLM's
WARNING/ERROR records inside the run's window, :mod:`engine.vllmlog.grammar`), environment."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from core.api import BuildReportRequest
from core.cost import CostBasis, cost_basis, parse_price, report_figures
from core.energy import NO_ENERGY_GAP, EnergyStats, first_send, hosts_energy, measured_bounds, replica_energy
from core.fingerprint import workload_fingerprint
from core.logfiles import ReadStats, iter_spans, mtime_s
from core.parsing import StampClock
from core.records import RequestRecord
from core.redact import strip_url_credentials
from core.replicas import replicas, split_devices
from core.report_resources import kv_bound_reason
from core.report_schema import (
    BenchmarkConfig,
    Environment,
    HostResources,
    LogFacts,
    Metrics,
    Report,
    Resources,
    error_summary,
)
from core.settings import Settings
from core.stats import RunMetrics, key_insight
from engine.vllmlog.grammar import PROBLEM_LEVELS, clean, clean_span, parse_line, text

MAX_EXAMPLES = 50
MAX_LINE_CHARS = 500
_NEEDLES = (b"WARNING", b"ERROR", b"CRITICAL")
EnergyOver = Callable[[float, float, float], EnergyStats]
"""``(start, end, idle_end) -> EnergyStats`` of this host (the sampler's)."""
PeersOver = Callable[[float, float, float], list[HostResources]]
"""``(start, end, idle_end) -> each peer's HostResources`` (PEER_SIDECARS)."""

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


def host_entry(resources: Resources, host: str) -> HostResources:
    """One host's GPU memory (``resources.hosts`` entry) from its ``resources`` section: peak, per GPU, why none."""
    return HostResources(host=host, **resources.model_dump(include=set(HostResources.model_fields)))


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


def run_window(request: BuildReportRequest, records: Sequence[RequestRecord]) -> tuple[float, float, float]:
    """``(start, end, idle_end)``: the measured rows' first send and last end, and the run's first send."""
    start, end = measured_bounds(records) or (request.window_start, request.window_end)
    return start, end, first_send(records) or min(start, request.window_start)


def replica_groups(settings: Settings, gpu_indices: Sequence[int]) -> list[tuple[str, list[int]]]:
    """Each local replica's NVML GPUs, split as the launcher splits GPU_DEVICES; empty unless several."""
    try:
        local = [r for r in replicas(settings) if r.local]
    except ValueError:  # ENGINE_URLS does not parse: the stack would not have started either
        return []
    if len(local) < 2 or len(gpu_indices) < len(local):
        return []
    groups = split_devices([str(i) for i in gpu_indices], len(local))
    return [(r.name, [int(i) for i in g.split(",")]) for r, g in zip(local, groups, strict=True)]


def run_energy(
    request: BuildReportRequest,
    records: Sequence[RequestRecord],
    resources: Resources,
    own: EnergyOver,
    peers: PeersOver | None = None,
    groups: Sequence[tuple[str, Sequence[int]]] = (),
) -> Resources:
    """``resources`` with the run's energy over :func:`run_window`: per replica for ``groups``; with ``peers``, each
    host entry its own and the total their sum."""
    start, end, idle_end = run_window(request, records)
    mine = own(start, end, idle_end)
    if groups and request.cluster is not None:
        tokens = {r.name: r.generation_tokens for r in request.cluster.replicas}
        mine = mine.model_copy(update={"replicas": replica_energy(mine, groups, tokens)})
    if peers is None or not resources.hosts:
        return resources.model_copy(update={"energy": mine})
    found = {p.url: p.energy for p in peers(start, end, idle_end)}
    hosts = [h.model_copy(update={"energy": mine if h.url is None else found.get(h.url, h.energy)})
             for h in resources.hosts]  # fmt: skip
    total = hosts_energy([(h.host, h.energy) for h in hosts]).model_copy(update={"replicas": mine.replicas})
    return resources.model_copy(update={"energy": total, "hosts": hosts})


def run_cost(config: BenchmarkConfig, resources: Resources) -> CostBasis | None:
    """PRICE_PER_HOUR and ENERGY_PRICE_PER_KWH applied to the GPUs (or hosts) that served; None when unset."""
    try:
        price = parse_price(config.price_per_hour) if config.price_per_hour else None
    except ValueError as exc:  # a body not written by the benchmark (which checks the knob before any load)
        return CostBasis(energy_price_usd_per_kwh=config.energy_price_per_kwh, unavailable_reason=str(exc))
    if resources.hosts:
        gpus = sum(len(h.gpus) for h in resources.hosts)
        unread = [h.host for h in resources.hosts if h.unavailable_reason]
        return cost_basis(price, config.energy_price_per_kwh, 0 if unread else gpus, len(resources.hosts),
                          f"host {', '.join(unread)} not reported" if unread else None)  # fmt: skip
    return cost_basis(price, config.energy_price_per_kwh, len(resources.gpus), 1, resources.gpu_unavailable_reason)


def read_log_facts(
    path: Path, window_start: float | None = None, window_end: float | None = None, max_bytes: int = 16 << 20
) -> LogFacts:
    """WARNING/ERROR/CRITICAL records of ``path`` stamped in the window (epoch s, 1 s of slack), once per record, at
    most :data:`MAX_EXAMPLES` per kind; never raises (a missing log: ``found`` False)."""
    stats = ReadStats()
    spans = iter_spans(path, stats, last_bytes=max_bytes)
    facts = LogFacts(log_file=str(path), found=False)
    if window_start is None:
        facts.found = path.is_file()
        return facts
    clock = StampClock(mtime_s(path))
    last_header = b""
    for span in spans:
        buf, start, stop = clean_span(*span)
        if not any(buf.find(needle, start, stop) >= 0 for needle in _NEEDLES):
            last_header = b""  # a block of INFO lines (most of a serving log): nothing to look at, line by line
            continue
        lines = buf[start:stop].split(b"\n")
        lines.pop()
        for raw in lines:
            if not any(needle in raw for needle in _NEEDLES):
                last_header = b""  # another record came between
                continue
            line = parse_line(raw, clock)
            if line.level not in PROBLEM_LEVELS or line.stamp_s is None or line.header == last_header:
                continue
            last_header = line.header  # the next lines of this record share it
            if not window_start - 1 <= line.stamp_s <= (window_end or line.stamp_s) + 1:
                continue
            bucket = facts.warnings_in_window if line.level == "WARNING" else facts.errors_in_window
            if len(bucket) < MAX_EXAMPLES:
                bucket.append(text(clean(raw), MAX_LINE_CHARS).strip())
    facts.found = bool(stats.files)
    return facts
