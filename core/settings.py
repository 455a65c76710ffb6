"""The stack's one settings object, read from the environment and ``.env`` (pydantic-settings).

Every service, the load generator and the tests read configuration only through :func:`get_settings`.
Environment names are the field names upper-cased (``VLLM_PORT``, ``CONCURRENCY``, ``MODEL`` ...).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core.distributions import lognormal_params
from core.parsing import option_values, parse_duration_s, parse_mix, parse_slo, parse_sweep, validate_name

PROJECT_ROOT = Path(__file__).resolve().parent.parent
_HOST_RE = re.compile(r"(?:\*\.)?[A-Za-z0-9_.\-]{1,253}|\[?[0-9A-Fa-f:.]{2,45}\]?")
DEFAULT_MODEL = "baidu/ERNIE-4.5-0.3B-PT"
SYNTHETIC_FALLBACK = "synthetic:ernie-4.5-0.3b"
RANDOM_DATASET = "random"  # DATASET=random: token-exact synthetic prompts



class Settings(BaseSettings):
    """All knobs of the stack. Units are in the names; every field maps to one environment variable."""

    model_config = SettingsConfigDict(
        env_file=PROJECT_ROOT / ".env",
        env_file_encoding="utf-8",
        extra="ignore",
        case_sensitive=False,
        allow_inf_nan=False,  # RATE=nan, BURSTINESS=inf ... stop before load, naming the variable
    )

    # --- model ---------------------------------------------------------------------------------------
    model: str | None = Field(
        default=None,
        description="Model vLLM serves: HF id, local directory or synthetic:NAME. Unset: ERNIE-4.5-0.3B-PT, else the "
        "synthetic stand-in.",
        json_schema_extra={"cli_flags": ["--serve-model"]},
    )
    vllm_model_path: str | None = Field(
        default=None,
        description="The seed image's name for MODEL (a local model folder); setting both to different values is an "
        "error.",
        json_schema_extra={"cli_flags": ["--vllm-model-path"]},
    )
    served_model_name: str | None = Field(default=None, description="Name clients use; default: a readable alias.")
    hf_token: str | None = Field(default=None, repr=False, description="Hugging Face token (never written out).")
    hf_hub_offline: bool = Field(default=False, description="Skip the hub reachability probe.")
    hub_probe_timeout_s: float = Field(default=5.0, gt=0)

    # --- vLLM ----------------------------------------------------------------------------------------
    vllm_host: str = "127.0.0.1"
    vllm_port: int = Field(default=8100, ge=1, le=65535)
    vllm_base_url: str | None = Field(
        default=None,
        description="Where clients (UI, benchmark) reach the OpenAI-compatible server; default from host/port.",
        json_schema_extra={"cli": ["--base-url"]},
    )
    vllm_dtype: str = "bfloat16"
    kv_cache_gb: float = Field(
        default=1.0,
        gt=0,
        validation_alias=AliasChoices("kv_cache_gb", "vllm_cpu_kvcache_space_gb", "vllm_cpu_kvcache_space"),
        description="vLLM's KV cache pool, GiB, on both builds (--kv-cache-memory-bytes). Older names: "
        "VLLM_CPU_KVCACHE_SPACE_GB, VLLM_CPU_KVCACHE_SPACE.",
    )
    vllm_max_model_len: int | None = Field(
        default=None, gt=0, description="Context length; unset: 4096 capped at the model's (must fit KV_CACHE_GB)."
    )
    vllm_cpu_num_of_reserved_cpu: int | None = Field(
        default=None,
        ge=0,
        description="CPU build: cores kept free of the engine's compute threads (VLLM_CPU_NUM_OF_RESERVED_CPU); "
        "unset: vLLM's own (1 on x86), measured fastest on a shared 2-core host (benchmarks/README.md); 0 = all cores.",
    )
    vllm_cpu_omp_threads_bind: str | None = Field(
        default=None,
        description="CPU build: VLLM_CPU_OMP_THREADS_BIND (auto, nobind, or core ids like 0-3); unset: auto.",
    )
    vllm_extra_args: str = Field(default="", description="Extra `vllm serve` arguments, shell-quoted.")
    engine_python: str | None = Field(default=None, description="Python of the engine env; default auto-detected.")
    startup_timeout_s: float = Field(default=900.0, gt=0)

    # --- UI, sidecar, Locust -------------------------------------------------------------------------
    ui_host: str = "127.0.0.1"
    ui_port: int = Field(default=8000, ge=1, le=65535)
    sidecar_host: str = "127.0.0.1"
    sidecar_port: int = Field(default=8200, ge=1, le=65535)
    sidecar_base_url: str | None = None
    locust_web_host: str = "127.0.0.1"
    locust_web_port: int = Field(default=8089, ge=1, le=65535)
    locust_extra_args: str = Field(
        default="", description="Extra Locust arguments for the web-UI service, e.g. --master or --worker."
    )
    gpu_sample_interval_s: float = Field(default=0.5, gt=0)
    engine_metrics_interval_s: float = Field(
        default=1.0, gt=0, description="How often the sidecar scrapes vLLM's /metrics for KV usage and queue gauges."
    )

    # --- UI ------------------------------------------------------------------------------------------
    ui_system_prompt: str = Field(default="", description="Default system prompt of the chat UI (editable per chat).")
    ui_password: str | None = Field(
        default=None, repr=False, description="Set to require a login (Chainlit password auth) for the chat UI."
    )
    ui_username: str = Field(default="admin", description="Login name when UI_PASSWORD is set.")
    ui_auth_secret: str | None = Field(
        default=None, repr=False, description="JWT secret for UI logins (CHAINLIT_AUTH_SECRET); default: per launch."
    )
    ui_status_interval_s: float = Field(default=5.0, gt=0, description="How often the UI re-probes vLLM's status.")
    ui_max_tokens: int = Field(
        default=4096,
        ge=1,
        description="Largest answer the chat UI asks for, tokens: a larger max_tokens in the chat settings is lowered "
        "to it before sending (the context left after the prompt is the hard limit).",
    )

    # --- security (README "Security") ----------------------------------------------------------------
    vllm_api_key: str | None = Field(
        default=None,
        repr=False,
        description="Key vLLM requires on /v1 (its --api-key, handed over in the environment); the UI, the benchmark, "
        "the sidecar and the health checks send it.",
    )
    sidecar_token: str | None = Field(
        default=None,
        repr=False,
        description="Token of the sidecar's writing endpoints (Authorization: Bearer); unset: read from "
        "SIDECAR_TOKEN_FILE.",
    )
    sidecar_token_file: Path | None = Field(
        default=None,
        description="File holding the sidecar token (a compose secret: /run/secrets/sidecar_token); default "
        "run/sidecar_token, made by `make up` when missing.",
    )
    sidecar_trusted_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="More host names the sidecar answers to (Host and Origin checks), comma-separated; 127.0.0.1, "
        "localhost, ::1, SIDECAR_HOST and the host of SIDECAR_BASE_URL always are.",
    )
    sidecar_max_body_mb: float = Field(
        default=64.0,
        gt=0,
        description="Largest request body the sidecar accepts, MiB (a run's rows take about 3 KiB each at 128 output "
        "tokens).",
    )
    reports_keep: int = Field(
        default=1000,
        ge=0,
        description="Reports kept in reports/ (the oldest removed first; named baselines never); 0: all.",
    )
    reports_max_age_days: float | None = Field(
        default=None, gt=0, description="Remove reports older than this, days (named baselines never); unset: no limit."
    )
    vllm_log_max_mb: float = Field(default=100.0, gt=0, description="vllm.log is rotated at this size, MiB.")
    vllm_log_backups: int = Field(default=5, ge=1, description="Rotated vllm.log files kept (vllm.log.1 ...).")
    vllm_log_to_file: bool = Field(
        default=False,
        description="The launcher itself writes logs/vllm.log (rotated) besides its output: for containers, where no "
        "supervisord writes it.",
    )
    requests_log_max_mb: float = Field(default=100.0, gt=0, description="requests.jsonl is rotated at this size, MiB.")
    requests_log_backups: int = Field(default=5, ge=1, description="Rotated requests.jsonl files kept.")
    locust_web_username: str = Field(
        default="admin", description="Login name of Locust's web UI when LOCUST_WEB_PASSWORD is set."
    )
    locust_web_password: str | None = Field(
        default=None, repr=False, description="Set to require a login (Locust's --web-login) for Locust's web UI."
    )

    # --- folders -------------------------------------------------------------------------------------
    logs_dir: Path = PROJECT_ROOT / "logs"
    reports_dir: Path = PROJECT_ROOT / "reports"
    models_dir: Path = PROJECT_ROOT / "models"
    run_dir: Path = Field(default=PROJECT_ROOT / "run", description="supervisord socket and pid (local mode).")
    prompts_file: Path = PROJECT_ROOT / "loadtest" / "data" / "prompts_zh.jsonl"

    # --- benchmark (make benchmark CONCURRENCY=.. REQUESTS=.. DURATION=.. WARMUP=.. MAX_TOKENS=..) -------
    concurrency: int = Field(
        default=50,
        ge=1,
        description="Concurrent users (closed loop).",
        json_schema_extra={"cli": ["--max-concurrency"]},
    )
    requests: int | None = Field(
        default=None,
        ge=1,
        description="Measured requests; default 200 unless DURATION.",
        json_schema_extra={"cli": ["--num-prompts"]},
    )
    duration: Annotated[float | None, NoDecode] = Field(default=None, description="Measured window, e.g. 60s, 5m.")
    warmup: int = Field(default=10, ge=0, description="Warmup requests, excluded from statistics.")
    max_tokens: int = Field(default=128, ge=1, description="Fixed output length (benchmark) / UI default.")
    output_len: Literal["lognormal", "fixed"] | None = Field(
        default=None,
        description="Benchmark output lengths: sampled (default) or MAX_TOKENS each; MAX_TOKENS=N alone means fixed.",
    )
    output_len_mean: float = Field(default=120.0, gt=0, description="Sampled output length: mean, tokens.")
    output_len_p95: float = Field(default=280.0, gt=0, description="Sampled output length: 95th percentile, tokens.")
    output_len_cap: int = Field(default=1024, ge=1, description="Largest sampled output length, tokens.")
    ignore_eos: bool = Field(default=False, description="Ask for exactly max_tokens (ignore_eos + min_tokens).")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    rate: float | None = Field(
        default=None,
        gt=0,
        description="Open loop: mean arrivals per second (unset: closed loop).",
        json_schema_extra={"cli": ["--request-rate"]},
    )
    burstiness: float = Field(default=1.0, gt=0, description="Open loop: gamma shape of arrival gaps (1 = Poisson).")
    ramp_up_s: float = Field(default=0.0, ge=0, description="Closed loop: seconds to start all users.")
    dataset: Path | None = Field(
        default=None,
        description="Prompt JSONL or ShareGPT JSON/JSONL, or random (token-exact synthetic prompts, see "
        "RANDOM_INPUT_LEN); default: the bundled corpus.",
        json_schema_extra={"cli": ["--dataset-path", "--dataset-name"]},
    )
    input_mix: Annotated[dict[str, float] | None, NoDecode] = Field(
        default=None, description="Input-length bucket weights, e.g. short:0.3,medium:0.5,long:0.2."
    )
    slo: Annotated[dict[str, float], NoDecode] = Field(
        default_factory=dict, description="Goodput SLOs, e.g. ttft_ms<=500,e2e_ms<=2000."
    )
    request_timeout_s: float = Field(default=300.0, gt=0)
    seed: int = 0
    profile: bool = Field(default=False, description="make benchmark PROFILE=1: torch-profile the measured window.")
    bench_model: str | None = Field(
        default=None,
        json_schema_extra={"cli": ["--model"]},
        description="Model the benchmark measures (an id of /v1/models); default: SERVED_MODEL_NAME, MODEL, or the "
        "only model served (several served and none chosen: the run stops and lists them).",
    )
    drain_s: float = Field(
        default=30.0,
        ge=0,
        description="When DURATION ends, how long requests in flight may still finish before they are cancelled "
        "(counted as incomplete), s.",
    )
    watchdog_s: float | None = Field(
        default=None,
        gt=0,
        description="Stop a run in which no request finishes for this long, s (default REQUEST_TIMEOUT_S + 60).",
    )
    max_error_rate_pct: float | None = Field(
        default=None, ge=0, le=100, description="Fail the run (exit 5) when its error rate is above this, %."
    )
    locust_plan_file: Path | None = Field(
        default=None,
        json_schema_extra={"cli": False},
        description="Internal: the run plan the benchmark writes for its Locust processes (unset: these settings).",
    )

    # --- load shapes, sweeps and repeats (make sweep SWEEP=auto; make benchmark REPEAT=3) -----------------
    max_in_flight: int | None = Field(
        default=None,
        ge=1,
        description="Open loop: at most this many requests in flight (vllm bench serve's --max-concurrency with "
        "--request-rate); an arrival waits for a free slot and the wait counts in its latencies.",
    )
    rate_end: float | None = Field(
        default=None,
        gt=0,
        description="Open loop: ramp the arrival rate linearly from RATE to this over the run (DURATION, else "
        "REQUESTS), req/s.",
        json_schema_extra={"cli": ["--ramp-up-end-rps"]},
    )
    random_input_len: int = Field(
        default=1024,
        ge=1,
        description="DATASET=random: prompt tokens of every request as the server counts them (chat template "
        "included; sized with its /tokenize).",
    )
    random_output_len: int = Field(
        default=128, ge=1, description="DATASET=random: output tokens every request asks for (max_tokens)."
    )
    session_turns: int = Field(
        default=1,
        ge=1,
        le=100,
        description="Closed loop: turns per conversation; each later turn carries the model's earlier answers.",
    )
    sweep: str | None = Field(
        default=None,
        description="Load sweep: auto (synchronous, maximum throughput, SWEEP_RATES open-loop rates between), "
        "concurrency:1,2,4,8 or rate:0.5,1,2 (--sweep alone: auto).",
        json_schema_extra={"cli_const": "auto"},
    )
    sweep_rates: int = Field(
        default=2, ge=1, le=20, description="SWEEP=auto: open-loop rates spread between its two measured points."
    )
    repeat: int = Field(
        default=1, ge=1, le=100, description="Runs of each load point; 2 or more give 95% confidence intervals."
    )
    cooldown_s: float = Field(default=5.0, ge=0, description="Pause between the runs of a sweep or repeat, s.")
    slo_attainment_pct: float = Field(
        default=95.0,
        gt=0,
        le=100,
        description="A sweep point meets the SLO when at least this share of its requests meets every bound, %.",
    )

    # --- reports (make benchmark GATE=v0.2.1 GATE_THRESHOLD_PCT=5; make baseline NAME=v0.2.1) ---------------
    gate: str | None = Field(
        default=None,
        description="Regression gate: fail the benchmark (exit 3) when it is worse than this named baseline.",
    )
    baseline: str | None = Field(
        default=None,
        description="Mark this run's report as the named baseline (as `make baseline NAME=` does afterwards).",
    )
    gate_threshold_pct: float = Field(
        default=5.0, ge=0, description="Gate tolerance: largest throughput drop / p99 latency rise allowed, %."
    )
    gate_error_rate_pp: float = Field(
        default=1.0, ge=0, description="Gate tolerance: largest error-rate rise over the baseline, percentage points."
    )

    # --- end reports ---

    @field_validator(
        "model",
        "vllm_model_path",
        "served_model_name",
        "hf_token",
        "requests",
        "vllm_max_model_len",
        "vllm_cpu_num_of_reserved_cpu",
        "vllm_cpu_omp_threads_bind",
        "rate",
        "dataset",
        "output_len",
        "gate",
        "baseline",
        "bench_model",
        "watchdog_s",
        "max_error_rate_pct",
        "vllm_api_key",
        "sidecar_token",
        "sidecar_token_file",
        "reports_max_age_days",
        "locust_web_password",
        "ui_password",
        "ui_auth_secret",
        "rate_end",
        "sweep",
        "max_in_flight",
        mode="before",
    )
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        """An empty or blank variable (``RATE=`` from make) means unset."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("gate", "baseline")
    @classmethod
    def _valid_gate(cls, value: str | None) -> str | None:
        """GATE and BASELINE must be baseline names (:func:`core.parsing.validate_name`)."""
        return None if value is None else validate_name(value)

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

    @field_validator("duration", mode="before")
    @classmethod
    def _parse_duration(cls, value: object) -> object:
        """DURATION text (60, 60s, 5m, 1h) -> seconds; blank means unset."""
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        return parse_duration_s(str(value))

    @field_validator("input_mix", mode="before")
    @classmethod
    def _parse_mix(cls, value: object) -> object:
        """INPUT_MIX text -> normalised weights (blank: the dataset's natural mix)."""
        if isinstance(value, str):
            return parse_mix(value) if value.strip() else None
        return value

    @field_validator("slo", mode="before")
    @classmethod
    def _parse_slo(cls, value: object) -> object:
        """SLO text -> {metric: bound in ms}."""
        return parse_slo(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_model(self) -> Settings:
        """VLLM_MODEL_PATH is MODEL under the seed image's name; both set to different models is ambiguous."""
        if self.vllm_model_path:
            if self.model and self.model != self.vllm_model_path:
                raise ValueError(
                    f"MODEL={self.model} and VLLM_MODEL_PATH={self.vllm_model_path} name different models: set one"
                )
            self.model = self.vllm_model_path
        return self

    @field_validator("sweep")
    @classmethod
    def _valid_sweep(cls, value: str | None) -> str | None:
        """SWEEP must parse (:func:`core.parsing.parse_sweep`); kept as written, without blanks."""
        if value is None:
            return None
        parse_sweep(value)
        return value.strip().replace(" ", "")

    @model_validator(mode="after")
    def _load_shape_fits(self) -> Settings:
        """RATE_END ramps from RATE; multi-turn sessions run in the closed loop (a user waits for each answer)."""
        if self.rate_end is not None and self.rate is None:
            raise ValueError(f"RATE_END={self.rate_end:g} ramps from RATE: set RATE (the start rate) too")
        open_sweep = self.sweep is not None and parse_sweep(self.sweep)[0] != "concurrency"
        if self.max_in_flight is not None and self.rate is None and not open_sweep:
            raise ValueError(
                f"MAX_IN_FLIGHT={self.max_in_flight} caps the open loop: set RATE (or an open-loop SWEEP); the closed "
                "loop's users are CONCURRENCY"
            )
        if self.session_turns > 1 and self.rate is not None:
            raise ValueError("SESSION_TURNS > 1 needs the closed loop (each turn waits for the answer): unset RATE")
        if self.session_turns > 1 and self.sweep and parse_sweep(self.sweep)[0] != "concurrency":
            raise ValueError(
                f"SESSION_TURNS > 1 needs the closed loop, and SWEEP={self.sweep} has open-loop points: sweep "
                "concurrency:1,2,4,... instead"
            )
        return self

    @model_validator(mode="after")
    def _default_request_count(self) -> Settings:
        if self.requests is None and self.duration is None:
            self.requests = 200
        return self

    @model_validator(mode="after")
    def _output_lengths_fit(self) -> Settings:
        """Sampled output lengths need a log-normal with OUTPUT_LEN_MEAN and OUTPUT_LEN_P95 (checked before load)."""
        if self.fixed_max_tokens is None:
            lognormal_params(self.output_len_mean, self.output_len_p95)
        return self

    # --- derived -------------------------------------------------------------------------------------
    @property
    def workload_file(self) -> Path:
        """The benchmark's dataset: DATASET or the bundled Chinese corpus."""
        return self.dataset or self.prompts_file

    @property
    def random_dataset(self) -> bool:
        """DATASET=random: synthetic prompts of exactly RANDOM_INPUT_LEN tokens (``vllm bench serve``'s random)."""
        return self.dataset is not None and str(self.dataset) == RANDOM_DATASET

    @property
    def sweep_spec(self) -> tuple[str, list[float]] | None:
        """SWEEP parsed: ``(kind, loads)``, or None without a sweep."""
        return parse_sweep(self.sweep) if self.sweep else None

    @property
    def fixed_max_tokens(self) -> int | None:
        """MAX_TOKENS when every request asks for it (OUTPUT_LEN=fixed, or MAX_TOKENS set alone), RANDOM_OUTPUT_LEN
        with DATASET=random; else None."""
        if self.random_dataset:
            return self.random_output_len
        if self.output_len == "fixed" or (self.output_len is None and "max_tokens" in self.model_fields_set):
            return self.max_tokens
        return None

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
        return (self.vllm_base_url or f"http://{_client_host(self.vllm_host)}:{self.vllm_port}").rstrip("/")

    @property
    def sidecar_url(self) -> str:
        """Base URL of the sidecar."""
        return (self.sidecar_base_url or f"http://{_client_host(self.sidecar_host)}:{self.sidecar_port}").rstrip("/")

    @property
    def engine_state_file(self) -> Path:
        """JSON written by the vLLM launcher: what model was resolved and why (read by UI and sidecar)."""
        return self.logs_dir / "engine_state.json"

    @property
    def engine_request_file(self) -> Path:
        """What the next engine launch changes (a model switch, the profiler), written by the engine controller."""
        return self.run_dir / "engine_request.json"

    @property
    def profile_dir(self) -> Path:
        """Where vLLM's torch profiler writes Chrome traces (absolute; the sidecar copies them into reports/)."""
        return (self.logs_dir / "profile").resolve()

    @property
    def vllm_log_file(self) -> Path:
        """vLLM's own log."""
        return self.logs_dir / "vllm.log"

    @property
    def requests_log_file(self) -> Path:
        """One line per chat request (UI and load tests), read by the log analyzer."""
        return self.logs_dir / "requests.jsonl"

    # --- security (derived) ---------------------------------------------------------------------------
    @property
    def vllm_api_keys(self) -> list[str]:
        """Every key vLLM accepts: VLLM_API_KEY first, then the values of ``--api-key`` in VLLM_EXTRA_ARGS."""
        keys = [self.vllm_api_key] if self.vllm_api_key else []
        with contextlib.suppress(ValueError):  # unbalanced quotes: the launcher refuses them
            keys += option_values(shlex.split(self.vllm_extra_args), "--api-key")
        return list(dict.fromkeys(key for key in keys if key))

    @property
    def vllm_client_key(self) -> str | None:
        """The key clients send to vLLM (the first of :attr:`vllm_api_keys`), None when vLLM needs none."""
        keys = self.vllm_api_keys
        return keys[0] if keys else None

    @property
    def vllm_headers(self) -> dict[str, str]:
        """HTTP headers of every request to vLLM: ``Authorization: Bearer <key>`` when a key is set, else none."""
        key = self.vllm_client_key
        return {"Authorization": f"Bearer {key}"} if key else {}

    @property
    def sidecar_token_path(self) -> Path:
        """Where the sidecar token is kept: SIDECAR_TOKEN_FILE, else ``<RUN_DIR>/sidecar_token``."""
        return self.sidecar_token_file or self.run_dir / "sidecar_token"

    def sidecar_auth_token(self) -> str | None:
        """The sidecar's write token: SIDECAR_TOKEN, else the first line of :attr:`sidecar_token_path`; None when
        neither is there (then the sidecar refuses every write)."""
        if self.sidecar_token:
            return self.sidecar_token
        try:
            token = self.sidecar_token_path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return token or None

    @property
    def sidecar_hosts(self) -> list[str]:
        """Host names the sidecar answers to: loopback names, SIDECAR_HOST, SIDECAR_BASE_URL's host and
        SIDECAR_TRUSTED_HOSTS."""
        from urllib.parse import urlsplit

        hosts = ["127.0.0.1", "localhost", "::1"]
        if self.sidecar_host not in ("0.0.0.0", "::", ""):
            hosts.append(self.sidecar_host)
        if self.sidecar_base_url:
            try:
                named = urlsplit(self.sidecar_base_url).hostname
            except ValueError:
                named = None
            if named:
                hosts.append(named)
        return list(dict.fromkeys(hosts + self.sidecar_trusted_hosts))


SERVICE_SECRETS: dict[str, frozenset[str]] = {
    "vllm": frozenset({"HF_TOKEN", "VLLM_API_KEY"}),
    "ui": frozenset({"VLLM_API_KEY", "UI_PASSWORD", "UI_AUTH_SECRET"}),
    "sidecar": frozenset({"VLLM_API_KEY", "SIDECAR_TOKEN"}),
    "locust": frozenset({"VLLM_API_KEY", "SIDECAR_TOKEN", "LOCUST_WEB_PASSWORD"}),
}
"""The secrets each service needs (every other secret variable is removed from its environment; compose files give
each container only these)."""


def secret_env_names() -> frozenset[str]:
    """Environment names of every secret setting (the ``repr=False`` fields)."""
    return frozenset(name.upper() for name, info in Settings.model_fields.items() if info.repr is False)


def service_env(service: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a service's process gets: ``base`` (default: this process's) without the secrets the service
    does not need (:data:`SERVICE_SECRETS`), so vLLM never holds the UI password nor Locust the HF token.

    Raises:
        KeyError: an unknown service name.
    """
    keep = SERVICE_SECRETS[service]
    env = dict(os.environ if base is None else base)
    for name in secret_env_names() - keep:
        env.pop(name, None)
    return env


def _client_host(bind_host: str) -> str:
    """A bind address as a client would dial it (0.0.0.0 -> 127.0.0.1)."""
    return "127.0.0.1" if bind_host in ("0.0.0.0", "::", "") else bind_host


def describe_validation_error(exc: ValidationError, from_cli: set[str] | frozenset[str] = frozenset()) -> str:
    """Turn pydantic's error into one line per bad variable: ``CONCURRENCY=0: must be >= 1``, or for a value given
    on the command line (its field in ``from_cli``) ``--concurrency=0: must be >= 1``."""
    lines = []
    for err in exc.errors():
        field = ".".join(str(part) for part in err["loc"])
        name = f"--{field.replace('_', '-')}" if field in from_cli else field.upper() or "settings"
        value = err.get("input")
        if isinstance(value, dict):
            shown = ""  # a model-level check: its message names the variables
        elif isinstance(value, str) and not value.isprintable():
            shown = f"={value!r}"  # a trailing newline or a control character is shown, not printed
        else:
            shown = f"={value}"
        lines.append(f"  {name}{shown}: {err['msg']}")
    where = "command line, environment, .env or make variables" if from_cli else "environment, .env or make variables"
    return f"Invalid configuration ({where}):\n" + "\n".join(lines)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once.

    Raises:
        SystemExit: with a readable message naming each bad variable (pydantic's ValidationError is turned into it).
    """
    try:
        return Settings()
    except ValidationError as exc:
        raise SystemExit(describe_validation_error(exc)) from None
