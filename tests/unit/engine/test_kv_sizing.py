"""KV cache sizing: bytes per token, pool tokens, the default context length and the start-up error when they clash.

Also the dtype and KV pool unset VLLM_DTYPE / KV_CACHE_GB mean on the host the engine finds: an AVX2-only CPU (no bf16
instructions) serves float32 with a doubled pool, bf16 CPUs and GPUs serve bfloat16."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.settings import Settings
from core.units import GIB
from engine import launcher as launch
from engine.engineplan import kv_plan
from engine.kvsizing import (
    DEFAULT_MAX_MODEL_LEN,
    KvGeometry,
    KvSizingError,
    cpu_flags,
    dtype_of,
    for_host,
    geometry_from_config,
    host_dtype,
    plan_kv,
    pool_gib,
    pool_tokens,
)
from engine.model_resolve import ResolvedModel

# ERNIE-4.5-0.3B-PT's config.json (the fields that size the KV cache), as published on the hub.
ERNIE_CONFIG = {
    "architectures": ["Ernie4_5ForCausalLM"],
    "hidden_size": 1024,
    "num_hidden_layers": 18,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}


def ernie() -> KvGeometry:
    geometry = geometry_from_config(ERNIE_CONFIG)
    assert geometry is not None
    return geometry


def test_ernie_costs_18_kib_per_token() -> None:
    """18 layers × K,V × 2 KV heads × 128 × 2 bytes = 18,432 bytes per token of ERNIE-4.5-0.3B."""
    assert ernie().bytes_per_token == 18 * 2 * 2 * 128 * 2 == 18_432


def test_one_gib_holds_58240_ernie_tokens() -> None:
    """1 GiB / 18,432 B = 58,254 tokens, rounded down to whole 128-token blocks: 58,240 (what vLLM's log shows)."""
    assert pool_tokens(GIB, 18_432) == 58_240


def test_missing_kv_heads_and_head_dim_fall_back_to_multi_head_attention() -> None:
    """Without num_key_value_heads and head_dim: every head has K and V of hidden/heads values."""
    geometry = geometry_from_config({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256})
    assert geometry is not None and geometry.bytes_per_token == 2 * 2 * 4 * 64 * 2


@pytest.mark.parametrize(
    "config",
    [
        {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256, "kv_lora_rank": 512},
        {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256, "sliding_window": 4096},
        {"num_attention_heads": 4},
    ],
)
def test_unmodelled_attention_gives_no_geometry(config: dict[str, object]) -> None:
    """Latent attention, sliding windows and incomplete configs are not guessed at."""
    assert geometry_from_config(config) is None


def test_default_plan_for_ernie() -> None:
    """Defaults: a 1 GiB pool of 58,240 tokens and a 4,096-token context (14.2 full-length requests at once)."""
    plan = plan_kv(1.0, None, ernie())
    assert (plan.kv_cache_bytes, plan.max_model_len, plan.tokens) == (GIB, DEFAULT_MAX_MODEL_LEN, 58_240)
    assert plan.full_length_requests == pytest.approx(14.22, abs=0.01)
    assert "50 users × 1,164 tokens" in plan.describe(50)


def test_default_context_is_capped_at_the_model_maximum() -> None:
    """A model with a 2,048-token maximum gets 2,048, not the default 4,096."""
    short = KvGeometry(layers=2, kv_heads=1, head_dim=64, dtype_bytes=2, max_position=2048)
    assert plan_kv(1.0, None, short).max_model_len == 2048


def test_a_set_context_length_is_kept() -> None:
    """VLLM_MAX_MODEL_LEN is passed as given when the pool holds it."""
    assert plan_kv(1.0, 32_768, ernie()).max_model_len == 32_768


def test_a_context_longer_than_the_pool_is_a_clear_error() -> None:
    """ERNIE's full 131,072 tokens in 1 GiB: the error names both variables and values that fit."""
    with pytest.raises(KvSizingError) as info:
        plan_kv(1.0, 131_072, ernie())
    message = str(info.value)
    assert "KV_CACHE_GB=1 holds 58,240 tokens" in message and "VLLM_MAX_MODEL_LEN=131072" in message
    assert "at least 2.25" in message and "at most 58240" in message
    assert plan_kv(2.25, 131_072, ernie()).max_model_len == 131_072


def test_a_pool_too_small_for_the_default_context_is_a_clear_error() -> None:
    """KV_CACHE_GB=0.05 (2,816 tokens) cannot hold the default 4,096-token context."""
    with pytest.raises(KvSizingError, match="the default context length 4096"):
        plan_kv(0.05, None, ernie())


def test_unknown_geometry_lets_vllm_fit_the_context() -> None:
    """A model vLLM has yet to download: the pool is set, the length is left to vLLM (auto)."""
    plan = plan_kv(1.0, None, None)
    assert plan.max_model_len is None and plan.tokens is None and plan.kv_cache_bytes == GIB


def _settings(**env: object) -> Settings:
    return Settings(_env_file=None, **env)  # type: ignore[call-arg,arg-type]


def _ernie_folder(tmp_path: Path) -> ResolvedModel:
    (tmp_path / "config.json").write_text(json.dumps(ERNIE_CONFIG))
    return ResolvedModel(str(tmp_path), "local", str(tmp_path), "ernie", False)


def test_gpu_argv_carries_the_pool_and_context(tmp_path: Path) -> None:
    """The GPU build's argv: --kv-cache-memory-bytes 1 GiB (so not 90 % of the card) and --max-model-len 4096."""
    argv = launch.vllm_argv(_settings(engine_python="python"), _ernie_folder(tmp_path))
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(GIB)
    assert argv[argv.index("--max-model-len") + 1] == "4096"
    assert "--gpu-memory-utilization" not in argv


def test_argv_follows_kv_cache_gb_and_max_len(tmp_path: Path) -> None:
    """KV_CACHE_GB=2.5 and VLLM_MAX_MODEL_LEN=16384 reach the command line."""
    argv = launch.vllm_argv(
        _settings(engine_python="python", kv_cache_gb=2.5, vllm_max_model_len=16384), _ernie_folder(tmp_path)
    )
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(int(2.5 * GIB))
    assert argv[argv.index("--max-model-len") + 1] == "16384"


def test_model_not_on_disk_gets_auto_length() -> None:
    """A hub model not yet downloaded: vLLM fits the length to the pool (--max-model-len auto)."""
    resolved = ResolvedModel("org/not-cached-xyz", "hub", "org/not-cached-xyz", "x", False)
    argv = launch.vllm_argv(_settings(engine_python="python"), resolved)
    assert argv[argv.index("--max-model-len") + 1] == "auto"


def test_launcher_refuses_a_context_the_pool_cannot_hold(tmp_path: Path) -> None:
    """`make up`'s first step (the launcher with --prepare-only) exits 2 naming KV_CACHE_GB and VLLM_MAX_MODEL_LEN,
    before anything is started; with the defaults it prints what the pool holds."""
    _ernie_folder(tmp_path)
    env = {**os.environ, "MODEL": str(tmp_path), "KV_CACHE_GB": "1", "LOGS_DIR": str(tmp_path / "logs")}
    cmd = [sys.executable, "-m", "engine.launcher", "--prepare-only"]
    refused = subprocess.run(cmd, env={**env, "VLLM_MAX_MODEL_LEN": "131072"}, capture_output=True, text=True)
    assert refused.returncode == 2
    assert "[ERROR] KV_CACHE_GB=1 holds 58,240 tokens" in refused.stderr and "VLLM_MAX_MODEL_LEN" in refused.stderr
    ok = subprocess.run(cmd, env={**env, "VLLM_MAX_MODEL_LEN": ""}, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "[INFO] KV cache 1 GiB = 58,240 tokens (18,432 B/token); max model len 4,096" in ok.stdout


def test_legacy_cpu_variable_sets_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """VLLM_CPU_KVCACHE_SPACE_GB (the old name) still sizes the pool; KV_CACHE_GB wins when both are set."""
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE_GB", "3")
    assert Settings(_env_file=None).kv_cache_gb == 3  # type: ignore[call-arg]
    monkeypatch.setenv("KV_CACHE_GB", "1.5")
    assert Settings(_env_file=None).kv_cache_gb == 1.5  # type: ignore[call-arg]


def test_cpu_env_uses_the_torch_compile_cache_and_vllm_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPU build: AOT compile off (its artifact cannot be loaded back), vLLM's own core binding (measured fastest on
    a shared 2-core host), vLLM's KV variable removed; VLLM_CPU_NUM_OF_RESERVED_CPU=0 gives the engine every core."""
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    monkeypatch.delenv("VLLM_USE_AOT_COMPILE", raising=False)
    env = launch.vllm_env(_settings(), "cpu")
    assert env["VLLM_USE_AOT_COMPILE"] == "0" and "VLLM_CPU_NUM_OF_RESERVED_CPU" not in env
    assert "VLLM_CPU_KVCACHE_SPACE" not in env and "VLLM_CPU_OMP_THREADS_BIND" not in env
    assert launch.vllm_env(_settings(vllm_cpu_num_of_reserved_cpu=0), "cpu")["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"


def test_gpu_env_keeps_vllm_compile_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU build: vLLM's AOT compile cache works there and is left alone."""
    monkeypatch.delenv("VLLM_USE_AOT_COMPILE", raising=False)
    assert "VLLM_USE_AOT_COMPILE" not in launch.vllm_env(_settings(), "gpu")


def test_blank_binding_variables_mean_vllm_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """VLLM_CPU_NUM_OF_RESERVED_CPU= (blank) leaves vLLM's default; a blank value never reaches vLLM (it cannot
    parse one); VLLM_CPU_OMP_THREADS_BIND is passed through."""
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "")
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    s = Settings(_env_file=None)  # type: ignore[call-arg]
    env = launch.vllm_env(s, "cpu")
    assert s.vllm_cpu_num_of_reserved_cpu is None and "VLLM_CPU_NUM_OF_RESERVED_CPU" not in env
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"


def test_argv_asks_vllm_for_each_answers_cached_prompt_tokens_once() -> None:
    """The engine reports usage.prompt_tokens_details.cached_tokens (per-turn prefix-cache hits of conversations):
    --enable-prompt-tokens-details is on the command line once, also when VLLM_EXTRA_ARGS already gives it."""
    resolved = ResolvedModel("org/not-cached-xyz", "hub", "org/not-cached-xyz", "x", False)
    plain = launch.vllm_argv(_settings(engine_python="python"), resolved)
    given = launch.vllm_argv(_settings(engine_python="python", vllm_extra_args="--enable-prompt-tokens-details"),
                             resolved)  # fmt: skip
    assert plain.count("--enable-prompt-tokens-details") == 1 == given.count("--enable-prompt-tokens-details")


AVX2_EPYC = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma f16c\n\nprocessor\t: 1\n"
ZEN4 = "flags\t\t: fpu avx avx2 avx512f avx512bw avx512_bf16\n"
SAPPHIRE_RAPIDS = "flags\t\t: avx2 avx512f amx_bf16 amx_tile\n"
GRAVITON3 = "Features\t: fp asimd sve bf16 i8mm\n"


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
