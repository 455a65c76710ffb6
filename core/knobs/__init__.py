"""The field groups of :class:`core.settings.Settings`, one plain pydantic model per group (the load generator's in
:mod:`core.knobs.load_knobs`); the settings object inherits them and adds the environment reading and the checks across
groups."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic_settings import NoDecode

from core.cost import parse_price
from core.slots import active_slot, slot_suffix


class Knobs(BaseModel):
    """A field group: each field's docstring is its description, line breaks read as spaces (docs/reference.md)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        for info in cls.__pydantic_fields__.values():
            if info.description:
                info.description = info.description.replace("\n", " ")


def from_text(parse: Callable[[str], Any]) -> BeforeValidator:
    """A field rule (``Annotated[T, from_text(parse)]``): a string (environment, ``.env``, flag) is ``parse(text)``;
    other values pass as they are. ``parse`` raises ValueError on bad text."""
    return BeforeValidator(lambda value: parse(value) if isinstance(value, str) else value)


DEFAULT_MODEL = "baidu/ERNIE-4.5-0.3B-PT"
SYNTHETIC_FALLBACK = "synthetic:ernie-4.5-0.3b"


def client_host(bind_host: str) -> str:
    """A bind address as a client would dial it: every address (``0.0.0.0``, ``::``, blank, Locust's ``*``) ->
    127.0.0.1."""
    return "127.0.0.1" if bind_host in ("0.0.0.0", "::", "", "*") else bind_host


class ServingKnobs(Knobs):
    """The model to serve, vLLM's launch knobs, where the UI, the sidecar and Locust listen, and the chat UI."""

    # --- model ---------------------------------------------------------------------------------------
    model: str | None = Field(default=None, json_schema_extra={"cli_flags": ["--serve-model"]})
    """Model vLLM serves: HF id, local directory or synthetic:NAME. Unset: ERNIE-4.5-0.3B-PT, else the synthetic
    stand-in."""
    vllm_model_path: str | None = Field(default=None, json_schema_extra={"cli_flags": ["--vllm-model-path"]})
    """The seed image's name for MODEL (a local model folder); setting both to different values is an error."""
    served_model_name: str | None = None
    """Name clients use; default: a readable alias."""
    hf_token: str | None = Field(default=None, repr=False)
    """Hugging Face token (never written out)."""
    hf_hub_offline: bool = False
    """Skip the hub reachability probe."""
    hub_probe_timeout_s: float = Field(default=5.0, gt=0)

    # --- vLLM ----------------------------------------------------------------------------------------
    vllm_host: str = "127.0.0.1"
    vllm_port: int = Field(default=8100, ge=1, le=65535)
    vllm_base_url: str | None = Field(default=None, json_schema_extra={"cli": ["--base-url"]})
    """Where clients (UI, benchmark) reach the OpenAI-compatible server; default from host/port."""
    vllm_dtype: str | None = Field(default=None, json_schema_extra={"cli": ["--dtype"]})
    """vLLM's --dtype of the weights; unset: bfloat16 on GPUs and on CPUs with bf16 instructions (AVX512-BF16, AMX),
    float32 on other CPUs (vLLM's CPU build emulates bf16 there, 4x slower)."""
    kv_cache_gb: float | None = Field(
        default=None,
        gt=0,
        validation_alias=AliasChoices("kv_cache_gb", "vllm_cpu_kvcache_space_gb", "vllm_cpu_kvcache_space"),
    )
    """vLLM's KV cache pool, GiB, on both builds (--kv-cache-memory-bytes); unset: 1 GiB in bfloat16, 2 GiB in
    float32 (the same tokens). Older names: VLLM_CPU_KVCACHE_SPACE_GB, VLLM_CPU_KVCACHE_SPACE."""
    vllm_max_model_len: int | None = Field(default=None, gt=0, json_schema_extra={"cli": ["--max-model-len"]})
    """Context length; unset: 4096 capped at the model's (must fit KV_CACHE_GB)."""
    vllm_cpu_num_of_reserved_cpu: int | None = Field(default=None, ge=0)
    """CPU build: cores kept free of the engine's compute threads (VLLM_CPU_NUM_OF_RESERVED_CPU); unset: vLLM's own
    (1 on x86), measured fastest on a shared 2-core host (docs/benchmarks.md); 0 = all cores."""
    vllm_cpu_omp_threads_bind: str | None = None
    """CPU build: VLLM_CPU_OMP_THREADS_BIND (auto, nobind, or core ids like 0-3); unset: auto."""
    vllm_extra_args: str = ""
    """Extra `vllm serve` arguments, shell-quoted."""
    gpu_devices: str | None = Field(default=None, validation_alias=AliasChoices("gpu_devices", "cuda_visible_devices"))
    """GPUs of the engine and the sidecar's readings, CUDA_VISIBLE_DEVICES semantics (indices in PCI order, or
    UUIDs); unset: all. Also read from CUDA_VISIBLE_DEVICES."""
    vllm_gpu_base: str = "vllm/vllm-openai:v0.32.0-cu129"
    """The vLLM image of the GPU build (Dockerfile.vllm): the -cu129 tag starts on drivers 575.51.03+ or of the 535,
    550, 560, 565 or 570 branch (its NVIDIA_REQUIRE_CUDA label; 525, 545, 555 are refused); the plain tag is vLLM's
    CUDA 13 build, driver 580.65.06+ (docs/gpu.md)."""
    engine_preflight: bool = False
    """Run make doctor's engine checks before vLLM starts, refusing on a too-old driver or too little GPU memory
    (set in the compose engine)."""
    gpu_headroom_gb: float = Field(default=1.0, ge=0)
    """GPU build: GiB per GPU beyond weights and KV pool (activations, CUDA graphs, sampler) that
    --gpu-memory-utilization asks for."""
    engine_python: str | None = None
    """Python of the engine env; default auto-detected."""
    startup_timeout_s: float = Field(default=900.0, gt=0)

    # --- UI, sidecar, Locust -------------------------------------------------------------------------
    ui_host: str = "127.0.0.1"
    ui_port: int = Field(default=8000, ge=1, le=65535)
    sidecar_host: str = "127.0.0.1"
    sidecar_port: int = Field(default=8200, ge=1, le=65535)
    sidecar_base_url: str | None = None
    locust_web_host: str = "127.0.0.1"
    locust_web_port: int = Field(default=8089, ge=1, le=65535)
    locust_extra_args: str = ""
    """Extra Locust arguments for the web-UI service, e.g. --master or --worker."""
    # Sampling intervals below 10 ms would keep a core busy sampling (NVML and /metrics update far slower).
    gpu_sample_interval_s: float = Field(default=0.5, ge=0.01)
    engine_metrics_interval_s: float = Field(default=1.0, ge=0.01)
    """How often the sidecar scrapes vLLM's /metrics for KV usage and queue gauges."""

    # --- UI ------------------------------------------------------------------------------------------
    ui_system_prompt: str = ""
    """Default system prompt of the chat UI (editable per chat)."""
    ui_password: str | None = Field(default=None, repr=False)
    """Set to require a login (Chainlit password auth) for the chat UI."""
    ui_username: str = "admin"
    """Login name when UI_PASSWORD is set."""
    ui_auth_secret: str | None = Field(default=None, repr=False)
    """JWT secret for UI logins (CHAINLIT_AUTH_SECRET); default: per launch."""
    ui_status_interval_s: float = Field(default=5.0, ge=0.01)
    """How often the UI re-probes vLLM's status."""
    ui_max_tokens: int = Field(default=4096, ge=1)
    """Largest answer the chat UI asks for, tokens: a larger max_tokens in the chat settings is lowered to it before
    sending (the context left after the prompt is the hard limit)."""

    @property
    def model_was_set(self) -> bool:
        """True when the user chose a model (then no silent fallback to the synthetic one)."""
        return self.model is not None

    @property
    def requested_model(self) -> str:
        """The model to serve before resolution: the user's choice or the default."""
        return self.model or DEFAULT_MODEL

    @property
    def vllm_url(self) -> str:
        """Base URL of vLLM's OpenAI server, without ``/v1``."""
        return (self.vllm_base_url or f"http://{client_host(self.vllm_host)}:{self.vllm_port}").rstrip("/")

    @property
    def sidecar_url(self) -> str:
        """Base URL of the sidecar."""
        return (self.sidecar_base_url or f"http://{client_host(self.sidecar_host)}:{self.sidecar_port}").rstrip("/")


_HOST_RE = re.compile(r"(?:\*\.)?[A-Za-z0-9_.\-]{1,253}|\[?[0-9A-Fa-f:.]{2,45}\]?")


class SecurityKnobs(Knobs):
    """Secrets (``repr=False``: environment only, never printed), the sidecar's guards and the log/report bounds."""

    # --- security (README "Security") ----------------------------------------------------------------
    vllm_api_key: str | None = Field(default=None, repr=False)
    """Key vLLM requires on /v1 (its --api-key, handed over in the environment); the UI, the benchmark, the sidecar
    and the health checks send it."""
    sidecar_token: str | None = Field(default=None, repr=False)
    """Token of the sidecar's writing endpoints (Authorization: Bearer); unset: read from SIDECAR_TOKEN_FILE."""
    sidecar_token_file: Path | None = None
    """File holding the sidecar token (a compose secret: /run/secrets/sidecar_token); default run/sidecar_token,
    made by `make up` when missing."""
    sidecar_trusted_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """More host names the sidecar answers to (Host and Origin checks), comma-separated; 127.0.0.1, localhost, ::1,
    SIDECAR_HOST and the host of SIDECAR_BASE_URL always are."""
    reports_keep: int = Field(default=1000, ge=0)
    """Reports kept in reports/ (the oldest removed first; named baselines never); 0: all."""
    reports_max_age_days: float | None = Field(default=None, gt=0)
    """Remove reports older than this, days (named baselines never); unset: no limit."""
    vllm_log_max_mb: float = Field(default=100.0, gt=0)
    """vllm.log is rotated at this size, MiB."""
    vllm_log_backups: int = Field(default=5, ge=1)
    """Rotated vllm.log files kept (vllm.log.1 ...)."""
    vllm_log_to_file: bool = False
    """The launcher itself writes logs/vllm.log (rotated) besides its output: for containers, where no supervisord
    writes it."""
    requests_log_max_mb: float = Field(default=100.0, gt=0)
    """requests.jsonl is rotated at this size, MiB."""
    requests_log_backups: int = Field(default=5, ge=1)
    """Rotated requests.jsonl files kept."""
    locust_web_username: str = "admin"
    """Login name of Locust's web UI when LOCUST_WEB_PASSWORD is set."""
    locust_web_password: str | None = Field(default=None, repr=False)
    """Set to require a login (Locust's --web-login) for Locust's web UI."""

    @field_validator("sidecar_trusted_hosts", mode="before")
    @classmethod
    def _parse_hosts(cls, value: object) -> object:
        """SIDECAR_TRUSTED_HOSTS text (``sidecar,bench.lan``) -> names; each a host name or address, no port."""
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, list):
            for host in value:
                if not isinstance(host, str) or not _HOST_RE.fullmatch(host):
                    raise ValueError(f"{host!r} is not a host name (letters, digits, '.', '-', '*.' or an IP; no port)")
        return value


PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent


class FolderKnobs(Knobs):
    """Where logs, reports, models, run files and the bundled prompts are; the files derived from them."""

    logs_dir: Path = PROJECT_ROOT / "logs"
    reports_dir: Path = PROJECT_ROOT / "reports"
    models_dir: Path = PROJECT_ROOT / "models"
    run_dir: Path = PROJECT_ROOT / "run"
    """supervisord socket and pid (local mode)."""
    prompts_file: Path = PROJECT_ROOT / "loadgen" / "workloads" / "data" / "prompts_zh.jsonl"
    container_uid: int | None = Field(default=None, ge=0, validation_alias=AliasChoices("container_uid", "app_uid"))
    """uid the containers run as (APP_UID, compose `user:`); unset: yours, as scripts/compose.sh sets."""
    container_gid: int | None = Field(default=None, ge=0, validation_alias=AliasChoices("container_gid", "app_gid"))
    """gid (APP_GID)."""

    @property
    def engine_state_file(self) -> Path:
        """JSON written by the vLLM launcher: what model was resolved and why (read by UI and sidecar)."""
        return self.logs_dir / f"engine_state{self.replica_suffix}.json"

    @property
    def engine_request_file(self) -> Path:
        """What the next engine launch changes, written by the engine controller (one per replica and slot)."""
        return self.run_dir / f"engine_request{self.replica_suffix}.json"

    @property
    def profile_dir(self) -> Path:
        """Where vLLM's torch profiler writes Chrome traces (absolute; the sidecar copies them into reports/)."""
        return (self.logs_dir / "profile").resolve()

    @property
    def vllm_log_file(self) -> Path:
        """vLLM's own log (replica K > 0 of a router stack: ``vllm-K.log``)."""
        return self.logs_dir / f"vllm{self.replica_suffix}.log"

    @property
    def replica_suffix(self) -> str:
        """``""``, ``-K`` for local replica K, plus ``-b`` for slot b: its program and file names."""
        replica = int(getattr(self, "engine_replica", 0))
        slot = getattr(self, "engine_slot", None) or active_slot(self.run_dir, replica)
        return (f"-{replica}" if replica else "") + slot_suffix(slot)

    @property
    def requests_log_file(self) -> Path:
        """One line per chat request (UI and load tests), read by the log analyzer."""
        return self.logs_dir / "requests.jsonl"


class ClusterKnobs(Knobs):
    """Engine replicas behind vLLM's router, and load workers on other hosts."""

    # --- engine replicas behind vLLM's router (docs/cluster.md) -------------------------------------------------
    replicas: int = Field(default=1, ge=0, le=64)
    """vLLM engines `make up` runs on this host; above 1 (or with ENGINE_URLS) vllm-router listens on VLLM_PORT in
    front of them. 0: router only (ENGINE_URLS needed)."""
    replica_port_base: int = Field(default=8110, ge=1, le=65535)
    """With the router: local replica K listens on REPLICA_PORT_BASE+K; the router's Prometheus port is the next one
    after the last replica."""
    engine_urls: str | None = None
    """Comma-separated URLs of vLLM engines on other hosts (http://host:port,...) the router also sends to."""
    router_policy: str | None = None
    """vllm-router --policy (round_robin, cache_aware, power_of_two, ...); unset: the router's own."""
    replica_hosts: str | None = None
    """Comma-separated host names of the local replicas 0..REPLICAS-1 (compose: vllm,vllm-1,...); unset: VLLM_HOST
    on this host."""
    peer_sidecars: str | None = None
    """Comma-separated sidecars on other GPU hosts (http://gpu2:8200,...; dns+http://name:8200: every address of a
    headless Service) whose GPU memory this sidecar adds to each report, asked with SIDECAR_TOKEN."""
    engine_replica: int = Field(default=0, ge=0, json_schema_extra={"cli": False})
    """Which local replica this engine process is (set by `make up` per replica; not a user knob)."""
    engine_slot: Literal["a", "b"] | None = Field(default=None, json_schema_extra={"cli": False})
    """Which of its two slots this engine process runs in (set by `make up` per program; not a user knob). Unset:
    the slot that serves now (core.slots)."""

    # --- model switch and restart (./start_vllm.sh, docs/models.md) ---------------------------------------------
    engine_switch: Literal["auto", "blue-green", "restart"] = "auto"
    """How ./start_vllm.sh replaces vLLM: blue-green starts the new engine beside the running one behind the router
    on VLLM_PORT and swaps them with no request lost; restart stops it first (down for a whole start); auto:
    blue-green where this host holds both engines, else restart (said with the figures). At `make up`: restart runs
    one engine on VLLM_PORT without the router in front."""
    switch_drain_timeout_s: float = Field(default=300.0, ge=0)
    """How long a blue/green switch lets the old engine finish the requests it still serves before stopping it
    (those still running then are cut, counted and said), s."""

    # --- load from several hosts ---------------------------------------------------------------------------------
    expect_workers: int = Field(default=0, ge=0)
    """Load workers on other hosts the benchmark waits for before any load (each runs ./run_benchmark.sh --worker
    --master-host THIS_HOST); 0: this host only."""
    expect_workers_timeout_s: float = Field(default=120.0, gt=0)
    """How long the benchmark waits for EXPECT_WORKERS to join, s."""
    master_bind_host: str = "0.0.0.0"
    """With EXPECT_WORKERS: the address the Locust master listens on for workers (0.0.0.0: every interface)."""
    master_port: int = Field(default=5557, ge=1, le=65535)
    """With EXPECT_WORKERS or --worker: the Locust master's port."""
    worker: bool = False
    """Run this host as a load worker of a benchmark on MASTER_HOST (no report here; rows go to the master)."""
    master_host: str | None = None
    """--worker: the host running the benchmark."""
    worker_runs: int = Field(default=1, ge=0)
    """--worker: how many runs in a row this worker joins (a SWEEP's points or REPEAT's runs: one each); 0: every
    run until no master answers for 5 minutes (Locust's connect retries)."""
    load_host_name: str | None = None
    """The name this host's rows carry (default: its host name)."""


class CostKnobs(Knobs):
    """The prices reports turn into USD per million tokens (the benchmark records them in each report's config).
    Unset: no cost."""

    # normalised spelling (2.5/gpu); a bare number is refused (GPU or host?)
    price_per_hour: Annotated[str | None, from_text(lambda text: parse_price(text).text)] = None
    """The serving hardware's price, US dollars per hour of each GPU (2.5/gpu) or of each serving host (12/host);
    reports then give USD per million output and total tokens. Unset: no cost."""
    energy_price_per_kwh: float | None = Field(default=None, ge=0)
    """Electricity, US dollars per kWh; reports with an energy figure then give its cost per million tokens beside
    the hardware's."""
