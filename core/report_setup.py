"""A report's setup, what its run was measured on and with: the environment (hardware, software, model, vLLM's
starts) and the benchmark's configuration (every knob of the plan); :class:`core.report_schema.Report` holds both."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from core.distributions import ThinkTime


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
    session_followups: Literal["dataset", "drawn"] | None = Field(
        default=None,
        description="Conversations: where the later turns came from: dataset (the dataset's real follow-up turns) "
        "or drawn (another workload prompt's user message each); None without conversations.",
    )
    think_time: ThinkTime | None = Field(
        default=None, description="Conversations: the user's pause before each later turn (THINK_TIME); None: none."
    )
    prefix_len_tokens: int | None = Field(
        default=None, description="PREFIX_LEN: tokens of the shared prefix before every prompt; None: no prefix."
    )
    prefix_count: int | None = Field(default=None, description="PREFIX_COUNT: distinct shared prefixes.")
    replicas: int | None = Field(
        default=None, description="Engines behind vllm-router (local REPLICAS + ENGINE_URLS); None: no router."
    )
    router_policy: str | None = Field(default=None, description="The router's --policy (None: no router).")
    router_version: str | None = Field(default=None, description="The vllm-router package's version.")
    profiled: bool = Field(
        default=False,
        description="vLLM ran with its torch profiler through the measured window (PROFILE=1): the profiler slows it, "
        "so the run is never a comparison reference.",
    )
    prefix_file: str | None = Field(
        default=None, description="The generated prefixes (a JSON list of texts, logs/datasets/prefixes_….json)."
    )
    dataset_skipped: str | None = Field(
        default=None,
        description="Entries of the dataset the run could not use and skipped, and where, e.g. '2 unusable entries "
        "skipped (lines 2, 7)'; None: none.",
    )
    dataset_file: str | None = Field(
        default=None,
        description="DATASET=random: the file of the prompts generated for this server's tokenizer (not part of the "
        "workload fingerprint: the same settings make the same prompts).",
    )
    trace_file: str | None = Field(
        default=None, description="TRACE: the replayed trace (BurstGPT CSV or Mooncake JSONL), as given; None: none."
    )
    trace_format: str | None = Field(default=None, description="TRACE: the trace's format (burstgpt or mooncake).")
    trace_sha256: str | None = Field(default=None, description="TRACE: sha256 (hex) of the trace file's bytes.")
    trace_speed: float | None = Field(
        default=None, description="TRACE_SPEED: the trace's times are divided by this (2: twice as fast)."
    )
    trace_rows: int | None = Field(
        default=None, description="TRACE: rows replayed (the first REQUESTS rows, those within DURATION)."
    )
    price_per_hour: str | None = Field(
        default=None,
        description="PRICE_PER_HOUR: the serving hardware's price, USD per hour per GPU or per host (2.5/gpu, "
        "12/host); None: no cost.",
    )
    energy_price_per_kwh: float | None = Field(
        default=None, description="ENERGY_PRICE_PER_KWH: electricity, USD per kWh; None: no energy cost."
    )
