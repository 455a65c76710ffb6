"""The dtype and KV pool unset VLLM_DTYPE / KV_CACHE_GB mean on the host the engine finds (engine/hostdtype.py): an
AVX2-only CPU (no bf16 instructions) serves float32 with a doubled pool, bf16 CPUs and GPUs serve bfloat16."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from core.settings import Settings
from core.units import GIB
from engine.engineplan import kv_plan
from engine.hostdtype import cpu_flags, dtype_of, for_host, host_dtype, pool_gib
from engine.model_resolve import ResolvedModel
from tests.unit.engine.test_kv_sizing import ERNIE_CONFIG

AVX2_EPYC = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma f16c\n\nprocessor\t: 1\n"
ZEN4 = "flags\t\t: fpu avx avx2 avx512f avx512bw avx512_bf16\n"
SAPPHIRE_RAPIDS = "flags\t\t: avx2 avx512f amx_bf16 amx_tile\n"
GRAVITON3 = "Features\t: fp asimd sve bf16 i8mm\n"


def _settings(**env: object) -> Settings:
    return Settings(_env_file=None, **env)  # type: ignore[call-arg,arg-type]


def _flags(tmp_path: Path, text: str) -> frozenset[str] | None:
    (tmp_path / "cpuinfo").write_text(text)
    return cpu_flags(tmp_path / "cpuinfo")


def test_an_avx2_cpu_serves_float32_and_bf16_cpus_and_gpus_bfloat16(tmp_path: Path) -> None:
    """AVX2-only x86 gets float32 (bf16 would be emulated); AVX512-BF16, AMX-BF16, Arm bf16 and GPUs bfloat16."""
    assert host_dtype("cpu", _flags(tmp_path, AVX2_EPYC))[0] == "float32"
    for text in (ZEN4, SAPPHIRE_RAPIDS, GRAVITON3):
        assert host_dtype("cpu", _flags(tmp_path, text))[0] == "bfloat16", text
    assert host_dtype("gpu", _flags(tmp_path, AVX2_EPYC)) == ("bfloat16", "GPU build")
    assert host_dtype("cpu", cpu_flags(tmp_path / "missing"))[0] == "bfloat16"  # unknown: vLLM's own choice


def test_vllm_dtype_given_wins_and_the_launch_log_says_what_unset_chose(tmp_path: Path) -> None:
    """VLLM_DTYPE=bfloat16 stays bfloat16 on an AVX2 host (no line); unset, the line names the dtype and why."""
    avx2 = _flags(tmp_path, AVX2_EPYC)
    given, line = for_host(_settings(vllm_dtype="bfloat16"), "cpu", avx2)
    assert given.vllm_dtype == "bfloat16" and line is None
    chosen, line = for_host(_settings(), "cpu", avx2)
    assert chosen.vllm_dtype == "float32" and dtype_of(chosen) == "float32"
    assert line is not None and line.startswith("[INFO] dtype float32 (the CPU has no bf16 instructions")


def test_the_default_pool_holds_the_same_tokens_in_float32(tmp_path: Path) -> None:
    """Unset KV_CACHE_GB: 1 GiB in bfloat16 and 2 GiB in float32, both 58,240 ERNIE-4.5-0.3B tokens (a halved pool
    preempted at 50 users); KV_CACHE_GB given is kept as given."""
    (tmp_path / "config.json").write_text(json.dumps(ERNIE_CONFIG))
    resolved = ResolvedModel(str(tmp_path), "local", str(tmp_path), "ernie", False)
    bf16 = kv_plan(_settings(vllm_dtype="bfloat16"), resolved)
    fp32 = kv_plan(_settings(vllm_dtype="float32"), resolved)
    assert (bf16.kv_cache_bytes, fp32.kv_cache_bytes) == (GIB, 2 * GIB)
    assert bf16.tokens == fp32.tokens == 58_240
    assert pool_gib(_settings(vllm_dtype="float32", kv_cache_gb=1.5)) == 1.5


def test_the_launcher_prints_the_dtype_this_host_gets(tmp_path: Path) -> None:
    """`make up`'s prepare step (the launcher, --prepare-only) says which dtype unset VLLM_DTYPE means here and sizes
    the pool for it: the same 58,240 tokens whichever this host's CPU gets."""
    (tmp_path / "config.json").write_text(json.dumps(ERNIE_CONFIG))
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_DTYPE", "KV_CACHE_GB")}
    env.update(MODEL=str(tmp_path), LOGS_DIR=str(tmp_path / "logs"))
    done = subprocess.run([sys.executable, "-m", "engine.launcher", "--prepare-only"], env=env, capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    expected, _ = host_dtype("cpu", cpu_flags())
    assert f"[INFO] dtype {expected} (" in done.stdout
    assert "= 58,240 tokens" in done.stdout
