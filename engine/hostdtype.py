"""The weights' dtype and the KV pool when VLLM_DTYPE / KV_CACHE_GB are unset: what the host computes natively.

vLLM's CPU build runs bfloat16 at full speed only with bf16 instructions (x86 AVX512-BF16/AMX-BF16, Arm ``bf16``);
elsewhere every matmul converts on the fly: on an AVX2 core ERNIE-4.5-0.3B prefilled 41 tok/s in bfloat16 against
159 in float32 (docs/benchmarks.md). So the stack serves float32 there and bfloat16 elsewhere. The KV pool follows
the dtype (1 GiB per 2 bytes of element), so it holds the same tokens either way.
"""

from __future__ import annotations

from pathlib import Path

from core.settings import Settings
from engine.kvsizing import DTYPE_BYTES

GPU_DTYPE = "bfloat16"
"""The dtype on GPUs and bf16-capable CPUs (ERNIE-4.5 ships bfloat16 weights)."""
CPU_FALLBACK_DTYPE = "float32"
"""The weights' dtype on CPUs without bf16 instructions."""
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
"""``/proc/cpuinfo`` flags (x86 ``flags``, Arm ``Features``) of CPUs that compute bfloat16 natively."""
POOL_GIB_PER_2_BYTES = 1.0
"""Unset KV_CACHE_GB: GiB of pool per 2 bytes of KV element (1 GiB in bfloat16, 2 GiB in float32)."""


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
