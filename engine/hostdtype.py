"""The weights' dtype and the KV pool the stack serves with when VLLM_DTYPE / KV_CACHE_GB are unset: what the host
computes natively.

vLLM's CPU build runs bfloat16 at full speed only where the CPU has bf16 instructions (x86: AVX512-BF16 or AMX-BF16,
``torch.cpu._is_avx512_bf16_supported``; Arm: the ``bf16`` feature). Elsewhere (AVX2-only x86, such as many AMD EPYC
hosts) its oneDNN linear cannot be built ("Failed to create oneDNN linear, fallback to torch linear") and every
matmul converts bf16 on the fly. Measured on ERNIE-4.5-0.3B, one core, AVX2 (docs/benchmarks.md, "The engine's dtype
on the host's CPU"): prefill 41 prompt tok/s in bfloat16 against 159 in float32, 32 streams 28 against 85 output
tok/s, and a 2,048-token prefill step of ≈ 50 s, which vLLM logs as "No available shared memory broadcast block found
in 60 seconds" while every stream waits. So the stack serves float32 there and bfloat16 everywhere else (GPUs, bf16
CPUs).

The KV pool follows the dtype (vLLM's KV cache takes the model's dtype): unset KV_CACHE_GB is 1 GiB per 2 bytes of a
KV element, so the pool holds the same tokens (58,240 for ERNIE-4.5-0.3B) in float32 as in bfloat16; a halved pool
preempted requests at 50 users.
"""

from __future__ import annotations

from pathlib import Path

from core.settings import Settings
from engine.kvsizing import DTYPE_BYTES

GPU_DTYPE = "bfloat16"
"""The weights' dtype on GPUs and bf16-capable CPUs (ERNIE-4.5 ships bfloat16 weights)."""
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
    """The dtype unset VLLM_DTYPE means on this host, and why (one clause for the launch log).

    ``build``: ``"cpu"`` or ``"gpu"`` (:func:`engine.engineplan.engine_build`); ``flags``: :func:`cpu_flags`.
    Unknown flags on the CPU build (no ``/proc/cpuinfo``) keep bfloat16, vLLM's own choice.
    """
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
    """``settings`` with VLLM_DTYPE filled in for this host when unset (:func:`host_dtype`), and the launch-log line
    saying so (None when VLLM_DTYPE was given). ``flags`` default: this host's (:func:`cpu_flags`)."""
    if settings.vllm_dtype:
        return settings, None
    dtype, why = host_dtype(build, cpu_flags() if flags is None else flags)
    line = f"[INFO] dtype {dtype} ({why}; VLLM_DTYPE overrides)"
    return settings.model_copy(update={"vllm_dtype": dtype}), line


def dtype_of(settings: Settings) -> str:
    """The weights' dtype of ``settings``: VLLM_DTYPE, else :data:`GPU_DTYPE` (before :func:`for_host` ran)."""
    return settings.vllm_dtype or GPU_DTYPE


def pool_gib(settings: Settings) -> float:
    """The KV pool, GiB: KV_CACHE_GB, else :data:`POOL_GIB_PER_2_BYTES` per 2 bytes of the dtype's element (the
    same tokens whatever the dtype)."""
    if settings.kv_cache_gb is not None:
        return settings.kv_cache_gb
    return POOL_GIB_PER_2_BYTES * DTYPE_BYTES.get(dtype_of(settings), 2) / 2
