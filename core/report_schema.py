"""The one report schema (pydantic, versioned). The sidecar is its only writer; JSON Schema comes from here.

A report is ``reports/benchmark_report_YYYYMMDD_HHMMSS.json``; the per-request rows it summarises sit next to it
as ``benchmark_report_YYYYMMDD_HHMMSS.requests.jsonl``. Every numeric field carries its unit in its name.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from core.clientview import ClientView
from core.serverview import ServerView
from core.serverview_cluster import ClusterView
from core.stats import RunMetrics

SCHEMA_VERSION = "1.3"
# 1.3: optional fields only (CHANGELOG.md): the client's added latency over the server's own clock
#      (``server.client_overhead``), per-GPU facts of the engine's GPUs and both CUDA versions, requested vs achieved
#      load (``metrics.schedule``), steady-state figures (``metrics.steady``), shared prefixes and the prefix-cache
#      hit rate, remote load workers (``config.remote_workers``; rows name ``host`` and ``process``). A 1.2 report
#      reads unchanged and is marked 1.3 when read (:func:`migrate_report`).
# 1.1: vLLM fingerprint, model revision, resource stats/timeline, server, baselines.
# 1.2: ``cpu_rss_peak_gb`` renamed ``vllm_rss_peak_gb`` (metrics, resources): it is the vLLM process tree's RSS.
#      Rows record how each stream ended (``end_reason``) and where token counts came from
#      (``output_tokens_source``); reports say what could not be measured (``gaps``) and whether the run was
#      ``interrupted``; metrics count ``requests_incomplete`` apart. Start-up facts have one place,
#      ``environment.startup``: ``model_load_s``, ``engine_init_s`` (were ``last_load_s``, ``last_engine_init_s``
#      there and ``model_load_s``, ``engine_init_s`` in ``logs``), ``kv_cache_line`` (was in ``logs``);
#      ``logs.vllm_version`` is gone (``environment.vllm_version``). Reports of 1.1 are migrated on reading
#      (:func:`migrate_report`); nothing is rewritten on disk.
#      KV cache: ``resources.kv_cache`` (pool, peak usage, queue peaks), ``server.preemptions``,
#      ``metrics.kv_cache_gb`` / ``kv_cache_usage_peak_percent`` / ``kv_bound``, and the timeline's KV usage and
#      running/waiting requests. Load generator: ``config.workers`` (Locust processes); ``client`` records each
#      load process's CPU and event-loop lag and how far that lag could have moved TTFT/ITL.
#      Robustness (same version, optional fields, so earlier 1.2 reports read unchanged): ``server_down`` (vLLM
#      stopped answering mid-run and the run was ended early) and ``rows_omitted`` (the rows stayed in the local
#      rows file because the body would pass SIDECAR_MAX_BODY_MB).
RENAMED_IN_1_2 = {"cpu_rss_peak_gb": "vllm_rss_peak_gb"}
STARTUP_RENAMED_IN_1_2 = {"last_load_s": "model_load_s", "last_engine_init_s": "engine_init_s"}
LOGS_TO_STARTUP_IN_1_2 = ("model_load_s", "engine_init_s", "kv_cache_line")


class StartupFacts(BaseModel):
    """vLLM's starts as read from its log (the one place of these facts): the first (cold) start against later (warm)
    restarts, and the latest start's model load, engine init and KV cache, seconds."""

    phase: str = Field(description="Phase of the latest start: ready, loading_weights, compiling, failed, ...")
    detail: str
    cold_start_s: float | None = Field(default=None, description="First start in the log, launch to ready.")
    warm_starts_s: list[float] = Field(default_factory=list, description="Later restarts, launch to ready.")
    model_load_s: float | None = Field(
        default=None,
        description="Model load of the latest start as vLLM logged it ('Model loading took', else 'Loading weights "
        "took'); the slowest worker's with tensor/pipeline parallelism.",
    )
    engine_init_s: float | None = Field(
        default=None, description="Engine init of the latest start (profiling, KV cache, warm-up, compile)."
    )
    kv_cache_line: str | None = Field(default=None, description="vLLM's line giving the KV cache size.")


class Environment(BaseModel):
    """Where the numbers were measured. GPU fields are None without NVML (see ``resources.gpu_unavailable_reason``)."""

    gpu_model: str | None = None
    gpu_count: int = 0
    driver_version: str | None = None
    cuda_version: str | None = None
    vllm_version: str | None = None
    vllm_commit: str | None = Field(default=None, description="vLLM's git commit, when its build records one.")
    vllm_fingerprint: str | None = Field(
        default=None,
        description="The `system_fingerprint` vLLM reports (version, parallelism, config hash), else "
        "vllm-<version>[+g<commit>].",
    )
    model_requested: str | None = None
    model_path: str | None = None
    served_model_name: str | None = None
    model_revision: str | None = Field(
        default=None, description="HF snapshot hash when the model is served from the HF cache, else None."
    )
    synthetic: bool = False
    synthetic_reason: str | None = Field(default=None, description="Why the synthetic stand-in is served, if it is.")
    cpu_model: str | None = None
    cpu_cores: int | None = None
    ram_total_gb: float | None = Field(default=None, description="Host memory, GiB (2**30 bytes).")
    python_version: str | None = Field(default=None, description="The sidecar's Python (vLLM's: engine_python_*).")
    gpu_indices: list[int] = Field(
        default_factory=list, description="NVML indices (PCI order) of the GPUs the engine uses (GPU_DEVICES)."
    )
    engine_cuda_runtime: str | None = Field(
        default=None,
        description="CUDA runtime of the engine's torch, from the launcher (cuda_version: the driver's maximum).",
    )
    engine_torch_version: str | None = Field(default=None, description="The engine's torch, recorded by the launcher.")
    engine_python_version: str | None = Field(default=None, description="The engine's Python (launcher's record).")
    project_version: str | None = None
    project_git_commit: str | None = None
    startup: StartupFacts | None = Field(default=None, description="None when vLLM's log cannot be read.")
    vllm_args: list[str] = Field(
        default_factory=list,
        description="vLLM's command line after the interpreter (secret values redacted), from logs/engine_state.json; "
        "empty when the engine state cannot be read (another server).",
    )


class BenchmarkConfig(BaseModel):
    """Every knob that changes the numbers; also the run plan the benchmark hands to Locust (one carrier of each
    knob across the process boundary: ``--plan-file``)."""

    mode: str = "closed_loop"
    concurrency: int = Field(description="Closed loop: concurrent users.")
    rate_req_per_sec: float | None = Field(default=None, description="Open loop: mean arrival rate.")
    burstiness: float | None = Field(default=None, description="Open loop: gamma shape (1 = Poisson).")
    requests: int | None = None
    duration_s: float | None = None
    warmup_requests: int
    ramp_up_s: float | None = None
    max_tokens: int = Field(description="Every request's max_tokens when lengths are fixed; else the sampling cap.")
    output_len_mean: float | None = Field(default=None, description="Sampled output lengths: mean, tokens.")
    output_len_p95: float | None = Field(default=None, description="Sampled output lengths: 95th percentile, tokens.")
    ignore_eos: bool = False
    temperature: float
    dataset: str
    input_mix: dict[str, float] | None = None
    seed: int
    slo: dict[str, float] = Field(default_factory=dict)
    request_timeout_s: float = Field(default=300.0, description="Longest wait for a connection or the next chunk.")
    drain_s: float = Field(
        default=30.0, description="Duration runs: how long requests in flight at the end may finish, s."
    )
    vllm_url: str
    model: str
    workers: int = Field(
        default=1, ge=1, description="Load-generating Locust processes (1: one process; N: a master and N workers)."
    )
    remote_workers: int = Field(
        default=0,
        ge=0,
        description="Load workers on other hosts (EXPECT_WORKERS) besides the local ones; their rows name their host.",
    )
    max_in_flight: int | None = Field(
        default=None,
        description="Open loop with a cap (MAX_IN_FLIGHT): at most this many requests in flight; later arrivals wait "
        "for a slot and the wait counts in their latencies (queue delay).",
    )
    rate_end_req_per_sec: float | None = Field(
        default=None, description="Open-loop ramp: the rate at the end of the run (linear from rate_req_per_sec)."
    )
    input_len_tokens: int | None = Field(
        default=None, description="DATASET=random: prompt tokens of every request, chat template included."
    )
    session_turns: int = Field(default=1, description="Turns per conversation (1: independent requests).")
    prefix_len_tokens: int | None = Field(
        default=None, description="PREFIX_LEN: tokens of the shared prefix before every prompt; None: no prefix."
    )
    prefix_count: int | None = Field(default=None, description="PREFIX_COUNT: distinct shared prefixes.")
    replicas: int | None = Field(
        default=None, description="Engines behind vllm-router (local REPLICAS + ENGINE_URLS); None: no router."
    )
    router_policy: str | None = Field(default=None, description="The router's --policy (None: no router).")
    router_version: str | None = Field(default=None, description="The vllm-router package's version.")
    prefix_file: str | None = Field(
        default=None, description="The generated prefixes (a JSON list of texts, logs/datasets/prefixes_….json)."
    )
    dataset_file: str | None = Field(
        default=None,
        description="DATASET=random: the file of the prompts generated for this server's tokenizer (not part of the "
        "workload fingerprint: the same settings make the same prompts).",
    )


class Metrics(RunMetrics):
    """The seed's flat headline names, memory peaks and the key insight, on top of the full run metrics."""

    latency_avg_ms: float | None
    latency_p50_ms: float | None
    latency_p90_ms: float | None
    latency_p99_ms: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    gpu_mem_peak_gb: float | None = Field(
        description="Max of NVML samples over the run window, GiB (used as nvidia-smi shows it); None without NVML."
    )
    vllm_rss_peak_gb: float | None = Field(description="Peak RSS of the vLLM process tree over the run window, GiB.")
    kv_cache_gb: float | None = Field(default=None, description="vLLM's KV cache pool, GiB (resources.kv_cache).")
    kv_cache_usage_peak_percent: float | None = Field(
        default=None, description="Peak of vLLM's KV cache usage over the run window, % of the pool."
    )
    kv_bound: str | None = Field(
        default=None,
        description="Why the run was bound by the KV cache (preemptions, or a full pool with requests waiting); "
        "None when it was not (or nothing was measured).",
    )
    key_insight: str


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


class LogFacts(BaseModel):
    """vLLM's log over the run window (start-up facts are in ``environment.startup``)."""

    log_file: str
    found: bool
    warnings_in_window: list[str] = Field(
        default_factory=list, description="WARNING records stamped inside the window (first line each, at most 50)."
    )
    errors_in_window: list[str] = Field(
        default_factory=list, description="ERROR and CRITICAL records stamped inside the window (at most 50)."
    )


class ErrorSummary(BaseModel):
    """Failed requests by cause, with a few example messages per cause."""

    by_kind: dict[str, int] = Field(default_factory=dict)
    examples: dict[str, list[str]] = Field(default_factory=dict)


class Comparison(BaseModel):
    """Percent changes against earlier reports of the same workload (``vs_previous``, ``vs_<baseline>``).

    In JSON every comparison also appears as a top-level key, so ``comparison.vs_v0.2.1.throughput_req_per_sec_pct``
    reads the same number as ``comparison.changes_pct["vs_v0.2.1"]["throughput_req_per_sec_pct"]``.
    """

    model_config = ConfigDict(json_schema_extra={"patternProperties": {"^vs_": {"type": "object"}}})

    fingerprint: str | None = Field(default=None, description="Workload fingerprint of this report.")
    against: dict[str, str] = Field(default_factory=dict, description="Comparison name -> report id.")
    changes_pct: dict[str, dict[str, float | None]] = Field(default_factory=dict)
    refused: dict[str, str] = Field(
        default_factory=dict,
        description="Named baselines not compared (``vs_<name>`` -> why, e.g. the fields that differ).",
    )
    notes: list[str] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _with_direct_keys(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name, changes in self.changes_pct.items():
            data.setdefault(name, changes)
        return data


def migrate_report(data: Any) -> Any:
    """Bring a stored report's JSON up to :data:`SCHEMA_VERSION` (1.1 -> 1.2: renamed and moved fields, see the
    notes at :data:`SCHEMA_VERSION`; 1.2 -> 1.3: only optional fields were added); other input as is."""
    if not isinstance(data, dict) or data.get("schema_version") not in ("1.1", "1.2"):
        return data
    data = dict(data)
    if data["schema_version"] == "1.2":
        data["schema_version"] = SCHEMA_VERSION
        return data
    for section in ("metrics", "resources"):
        if isinstance(data.get(section), dict):
            data[section] = _renamed(data[section], RENAMED_IN_1_2)
    if isinstance(data.get("environment"), dict) and isinstance(data.get("logs"), dict):
        data["environment"], data["logs"] = _startup_facts_moved(data["environment"], data["logs"])
    data["schema_version"] = SCHEMA_VERSION
    return data


def _renamed(part: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    part = dict(part)
    for old, new in names.items():
        if old in part and new not in part:
            part[new] = part.pop(old)
    return part


def _startup_facts_moved(
    environment: dict[str, Any], logs: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """1.1 -> 1.2: ``logs``' start-up facts into ``environment.startup`` (its own figures first)."""
    environment, logs = dict(environment), dict(logs)
    moved = {name: logs.pop(name, None) for name in LOGS_TO_STARTUP_IN_1_2}
    log_version = logs.pop("vllm_version", None)
    if environment.get("vllm_version") is None and log_version is not None:
        environment["vllm_version"] = log_version
    startup = environment.get("startup")
    if isinstance(startup, dict):
        startup = _renamed(startup, STARTUP_RENAMED_IN_1_2)
    elif any(value is not None for value in moved.values()):
        startup = {"phase": "unknown", "detail": "not recorded (a 1.1 report: figures from its log facts)"}
    if isinstance(startup, dict):
        for name, value in moved.items():
            if startup.get(name) is None and value is not None:
                startup[name] = value
        environment["startup"] = startup
    return environment, logs


class Report(BaseModel):
    """A benchmark baseline report."""

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        return migrate_report(data)

    schema_version: str = SCHEMA_VERSION
    report_id: str
    timestamp: str = Field(description="ISO 8601, UTC, when the report was built.")
    run_started_at: float
    run_ended_at: float
    environment: Environment
    config: BenchmarkConfig
    metrics: Metrics
    errors: ErrorSummary
    resources: Resources
    logs: LogFacts
    comparison: Comparison
    server: ServerView | None = Field(
        default=None, description="vLLM's /metrics over the window and its agreement with the client (None: no scrape)."
    )
    client: ClientView | None = Field(default=None, description="The load generator's own resource use.")
    cluster: ClusterView | None = Field(
        default=None, description="Every engine behind the router over the window (None: one engine, no router)."
    )
    profile: ProfileInfo | None = Field(default=None, description="Profiler traces, when PROFILE=1.")
    interrupted: bool = Field(
        default=False, description="The run was stopped early (Ctrl-C): its rows so far; never a comparison reference."
    )
    server_down: str | None = Field(
        default=None,
        description="vLLM stopped answering mid-run (connection-level failures for SERVER_DOWN_S with no success) "
        "and the run was ended early: when and how. Its rows so far are counted; never a comparison reference.",
    )
    rows_omitted: str | None = Field(
        default=None,
        description="Why the per-request rows are not beside this report (the body would pass SIDECAR_MAX_BODY_MB) "
        "and where they are kept; None: they are.",
    )
    gaps: list[str] = Field(
        default_factory=list,
        description="What could not be measured and why, e.g. 'server cross-check skipped: GET /metrics answered 404'.",
    )
    requests_file: str = Field(description="Per-request rows (JSONL) next to this report.")
    markdown_file: str | None = Field(default=None, description="Markdown summary next to this report.")
    html_file: str | None = Field(default=None, description="Self-contained HTML report (with plots) next to it.")
    csv_file: str | None = Field(
        default=None, description="One CSV row per request next to it (and ``<id>.summary.csv``: one summary row)."
    )


class ProfileInfo(BaseModel):
    """vLLM torch-profiler traces of the measured window (``make benchmark PROFILE=1``)."""

    dir: str = Field(description="Folder relative to reports/, e.g. profile/20261129_221901.")
    files: list[str] = Field(description="Chrome-trace files (gzip'd JSON with traceEvents).")
    open_with: str


def json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of :class:`Report`."""
    return Report.model_json_schema()
