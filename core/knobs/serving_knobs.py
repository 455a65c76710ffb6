"""Settings fields of the model, vLLM, the service addresses and the chat UI (a group of
:class:`core.settings.Settings`).
"""

from __future__ import annotations

from pydantic import AliasChoices, Field

from core.knobs import Knobs

DEFAULT_MODEL = "baidu/ERNIE-4.5-0.3B-PT"
SYNTHETIC_FALLBACK = "synthetic:ernie-4.5-0.3b"


def client_host(bind_host: str) -> str:
    """A bind address as a client would dial it (0.0.0.0 -> 127.0.0.1)."""
    return "127.0.0.1" if bind_host in ("0.0.0.0", "::", "") else bind_host


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
