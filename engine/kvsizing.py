"""KV cache sizing: the tokens ``KV_CACHE_GB`` holds, the default context length, and the check that one
request of the longest allowed length fits, before vLLM starts.

Bytes per token (the K and V tensors per layer, ``vllm/v1/kv_cache_interface.py`` ``page_size_bytes``):
``layers × 2 × kv_heads × head_dim × dtype bytes``; ERNIE-4.5-0.3B: 18,432 B, 58,254 tokens per GiB. Per GPU
(:func:`per_gpu`, as ``--kv-cache-memory-bytes`` is per worker) a TP rank holds ``max(1, kv_heads // tp)`` heads
(``ModelConfig.get_num_kv_heads``) and a PP stage ``ceil(layers / pp)`` layers (``get_pp_indices``).

When VLLM_DTYPE / KV_CACHE_GB are unset, the dtype and pool are what the host computes natively (:func:`for_host`):
vLLM's CPU build runs bfloat16 at full speed only with bf16 instructions (x86 AVX512-BF16/AMX-BF16, Arm ``bf16``);
elsewhere every matmul converts on the fly: on an AVX2 core ERNIE-4.5-0.3B prefilled 41 tok/s in bfloat16 against
159 in float32 (docs/benchmarks.md). So the stack serves float32 there and bfloat16 elsewhere. The KV pool follows
the dtype (1 GiB per 2 bytes of element), so it holds the same tokens either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.atomicfile import read_json_object
from core.settings import Settings
from core.units import GIB

DEFAULT_MAX_MODEL_LEN = 4096
"""Context length when VLLM_MAX_MODEL_LEN is unset (capped at the model's maximum): the longest bundled prompt (2,722
tokens) plus the largest sampled output (1,024), rounded up to a power of two."""
TOKEN_GRANULE = 128
"""Pools are rounded down to blocks of this many tokens (vLLM's CPU block size, a multiple of the GPU's 16)."""
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
GPU_DTYPE = "bfloat16"
"""The dtype on GPUs and bf16-capable CPUs (ERNIE-4.5 ships bfloat16 weights)."""
CPU_FALLBACK_DTYPE = "float32"
"""The weights' dtype on CPUs without bf16 instructions."""
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
"""``/proc/cpuinfo`` flags (x86 ``flags``, Arm ``Features``) of CPUs that compute bfloat16 natively."""
POOL_GIB_PER_2_BYTES = 1.0
"""Unset KV_CACHE_GB: GiB of pool per 2 bytes of KV element (1 GiB in bfloat16, 2 GiB in float32)."""


class KvSizingError(ValueError):
    """The KV cache cannot hold one request of the configured length; the message names both variables."""


@dataclass(frozen=True)
class KvGeometry:
    """What one token costs in the KV cache of a model, and the model's own context limit."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int
    max_position: int | None

    @property
    def bytes_per_token(self) -> int:
        """``layers × 2 × kv_heads × head_dim × dtype_bytes`` (K and V of every layer)."""
        return self.layers * 2 * self.kv_heads * self.head_dim * self.dtype_bytes


def per_gpu(geometry: KvGeometry, tensor_parallel: int = 1, pipeline_parallel: int = 1) -> KvGeometry:
    """The geometry one GPU holds at ``tensor_parallel`` × ``pipeline_parallel`` ranks (see the module docstring)."""
    return replace(
        geometry,
        kv_heads=max(1, geometry.kv_heads // max(1, tensor_parallel)),
        layers=-(-geometry.layers // max(1, pipeline_parallel)),
    )


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's part of a ``config.json``: its ``text_config`` (multimodal wrappers), else itself."""
    text = config.get("text_config")
    return text if isinstance(text, Mapping) else config


def geometry_from_config(config: Mapping[str, Any], dtype: str = "bfloat16") -> KvGeometry | None:
    """The KV geometry of a Hugging Face ``config.json`` (dense or GQA attention), or None.

    ``num_key_value_heads`` defaults to ``num_attention_heads`` and ``head_dim`` to ``hidden_size / heads``. Latent
    attention (``kv_lora_rank``), sliding windows and hybrid models are not modelled: None.
    """
    cfg = text_config(config)
    if cfg.get("kv_lora_rank") or cfg.get("sliding_window") or cfg.get("layer_types"):
        return None
    try:
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    if min(layers, heads, kv_heads, head_dim) <= 0:
        return None
    max_position = cfg.get("max_position_embeddings")
    return KvGeometry(
        layers=layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        dtype_bytes=DTYPE_BYTES.get(dtype, 2),
        max_position=int(max_position) if isinstance(max_position, int) and max_position > 0 else None,
    )


def read_config(model_dir: Path) -> dict[str, Any] | None:
    """``config.json`` of a local model folder, or None when absent or unreadable."""
    return read_json_object(model_dir / "config.json")


@dataclass(frozen=True)
class KvPlan:
    """The KV cache and context length vLLM is started with; ``max_model_len`` and ``tokens`` are None when the
    geometry is unknown before launch (``--max-model-len auto``)."""

    kv_cache_bytes: int
    max_model_len: int | None
    bytes_per_token: int | None
    tokens: int | None

    @property
    def full_length_requests(self) -> float | None:
        """How many requests of ``max_model_len`` tokens the pool holds at once (vLLM's "maximum concurrency")."""
        if self.tokens is None or not self.max_model_len:
            return None
        return self.tokens / self.max_model_len

    def describe(self, concurrency: int) -> str:
        """One line for the launch log: pool size in GiB and tokens, what fits at full length and per user."""
        gib = self.kv_cache_bytes / GIB
        if self.tokens is None or self.bytes_per_token is None:
            return f"KV cache {gib:g} GiB; context length fitted by vLLM (model geometry unknown before launch)"
        return (
            f"KV cache {gib:g} GiB = {self.tokens:,} tokens ({self.bytes_per_token:,} B/token); "
            f"max model len {self.max_model_len:,} ({self.full_length_requests:.1f} full-length requests at once, "
            f"or {concurrency} users × {self.tokens // concurrency:,} tokens)"
        )


def pool_tokens(kv_cache_bytes: int, bytes_per_token: int) -> int:
    """Tokens a pool of ``kv_cache_bytes`` holds, rounded down to whole :data:`TOKEN_GRANULE` blocks."""
    return kv_cache_bytes // (bytes_per_token * TOKEN_GRANULE) * TOKEN_GRANULE


def plan_kv(kv_cache_gb: float, max_model_len: int | None, geometry: KvGeometry | None) -> KvPlan:
    """Size the KV cache (``kv_cache_gb`` GiB) and the context length (``max_model_len``, else the default
    capped at the model's maximum).

    Raises:
        KvSizingError: the pool cannot hold one request of the context length; the message says what fits.
    """
    kv_bytes = int(kv_cache_gb * GIB)
    if geometry is None:
        return KvPlan(kv_bytes, max_model_len, None, None)
    length = max_model_len or DEFAULT_MAX_MODEL_LEN
    if max_model_len is None and geometry.max_position is not None:
        length = min(length, geometry.max_position)
    tokens = pool_tokens(kv_bytes, geometry.bytes_per_token)
    if tokens < length:
        need_gb = -(-length // TOKEN_GRANULE) * TOKEN_GRANULE * geometry.bytes_per_token / GIB
        origin = f"VLLM_MAX_MODEL_LEN={length}" if max_model_len else f"the default context length {length}"
        raise KvSizingError(
            f"KV_CACHE_GB={kv_cache_gb:g} holds {tokens:,} tokens of this model ({geometry.bytes_per_token:,} B per "
            f"token), fewer than one request of {origin} needs. Raise KV_CACHE_GB to at least {need_gb:.2f} or set "
            f"VLLM_MAX_MODEL_LEN to at most {tokens}."
        )
    return KvPlan(kv_bytes, length, geometry.bytes_per_token, tokens)


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str] | None:
    """The first CPU's flags (x86 ``flags``, Arm ``Features``), or None when ``cpuinfo`` cannot be read."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def host_dtype(build: str, flags: frozenset[str] | None) -> tuple[str, str]:
    """The dtype unset VLLM_DTYPE means on this host and why (a clause for the launch log); ``build``
    ``"cpu"``/``"gpu"``, ``flags`` of :func:`cpu_flags` (unknown: bfloat16, vLLM's own choice)."""
    if build != "cpu":
        return GPU_DTYPE, "GPU build"
    if flags is None:
        return GPU_DTYPE, "CPU flags unreadable: vLLM's own choice"
    native = sorted(BF16_FLAGS & flags)
    if native:
        return GPU_DTYPE, f"the CPU computes bf16 natively ({', '.join(native)})"
    return CPU_FALLBACK_DTYPE, (
        "the CPU has no bf16 instructions (no avx512_bf16/amx_bf16): vLLM's CPU build would emulate bfloat16 at "
        "about a quarter of float32's prefill speed"
    )


def for_host(settings: Settings, build: str, flags: frozenset[str] | None = None) -> tuple[Settings, str | None]:
    """``settings`` with VLLM_DTYPE filled in when unset (:func:`host_dtype`; ``flags`` default: this
    host's), and the launch-log line saying so (None when VLLM_DTYPE was given)."""
    if settings.vllm_dtype:
        return settings, None
    dtype, why = host_dtype(build, cpu_flags() if flags is None else flags)
    line = f"[INFO] dtype {dtype} ({why}; VLLM_DTYPE overrides)"
    return settings.model_copy(update={"vllm_dtype": dtype}), line


def dtype_of(settings: Settings) -> str:
    """The weights' dtype of ``settings``: VLLM_DTYPE, else :data:`GPU_DTYPE` (before :func:`for_host` ran)."""
    return settings.vllm_dtype or GPU_DTYPE


def pool_gib(settings: Settings) -> float:
    """The KV pool, GiB: KV_CACHE_GB, else :data:`POOL_GIB_PER_2_BYTES` per 2 bytes of the dtype."""
    if settings.kv_cache_gb is not None:
        return settings.kv_cache_gb
    return POOL_GIB_PER_2_BYTES * DTYPE_BYTES.get(dtype_of(settings), 2) / 2
