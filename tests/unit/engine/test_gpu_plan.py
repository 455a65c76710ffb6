"""The GPU plan: per-GPU KV at tensor/pipeline parallelism (against vLLM's own sizing code), and a
``--gpu-memory-utilization`` that lets vLLM start beside another tenant (against vLLM's own start-up check)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from core.gpus import DeviceMemory
from core.settings import Settings
from core.units import GIB
from engine import launcher as launch
from engine.engineplan import ModelFacts, engine_versions, gpu_plan, kv_plan
from engine.gpupeak import weights_from_config
from engine.gpuplan import ParallelSizes, from_nvml, memory_plan, parallel_sizes
from engine.kvsizing import geometry_from_config, per_gpu
from engine.model_resolve import ResolvedModel
from tests.fakes import FakeNvml
from tests.unit.engine.test_kv_sizing import ERNIE_CONFIG
from tests.unit.engine_interpreter import ENGINE_PY

ERNIE_FULL = {**ERNIE_CONFIG, "intermediate_size": 3072, "vocab_size": 103424, "tie_word_embeddings": True}
A10_TOTAL = 23028 * 1024**2  # what NVML reports for an A10 ("24 GB")
GB = 10**9

VLLM_KV_PROBE = r"""
import json, sys
from types import SimpleNamespace
import torch
from vllm.config.cache import KVCacheLayout
from vllm.config.model import ModelConfig
from vllm.distributed.utils import get_pp_indices
from vllm.v1.core.kv_cache_utils import _get_kv_cache_bytes_per_block
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheGroupSpec
tp, pp, pool = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
model = SimpleNamespace(use_mla=False, model_arch_config=SimpleNamespace(total_num_kv_heads=2))
heads = ModelConfig.get_num_kv_heads(model, SimpleNamespace(tensor_parallel_size=tp))
layers = max(e - s for s, e in (get_pp_indices(18, r, pp) for r in range(pp)))
spec = FullAttentionSpec(block_size=16, num_kv_heads=heads, head_size=128, dtype=torch.bfloat16)
group = KVCacheGroupSpec(layer_names=[f"model.layers.{i}.self_attn" for i in range(layers)], kv_cache_spec=spec)
per_block = _get_kv_cache_bytes_per_block([group], KVCacheLayout.LBNHC)
print(json.dumps({"tokens": pool // per_block * 16, "bytes_per_token": per_block // 16}))
"""

VLLM_REQUEST_PROBE = r"""
import sys
from types import SimpleNamespace
from vllm.v1.worker.utils import request_memory
total, free, util = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
snapshot = SimpleNamespace(total_memory=total, free_memory=free, device_="cuda:0")
try:
    print(request_memory(snapshot, SimpleNamespace(gpu_memory_utilization=util)))
except ValueError as exc:
    print("refused:", exc)
"""


@pytest.fixture(scope="module")
def engine(engine_interpreter: Callable[..., str]) -> Callable[..., str]:
    """Runs a probe script in the engine env's Python (vLLM importable): the suite's one interpreter
    (``tests/unit/conftest.py``)."""
    return engine_interpreter


def _settings(**env: object) -> Settings:
    return Settings(_env_file=None, **env)  # type: ignore[call-arg,arg-type]


def _ernie(tmp_path: Path) -> ResolvedModel:
    (tmp_path / "config.json").write_text(json.dumps(ERNIE_FULL))
    return ResolvedModel(str(tmp_path), "local", str(tmp_path), "ernie", False)


@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 1), (8, 1), (1, 2), (2, 4)])
def test_kv_plan_per_gpu_matches_vllms_sizing(tmp_path: Path, tp: int, pp: int, engine: Callable[..., str]) -> None:
    """ERNIE-4.5-0.3B at TP 2 and 8 holds 9,216 B per token per GPU (2 KV heads split, then replicated): 116,480
    tokens per GiB, twice TP 1's 58,240; vLLM's own spec and block count say the same (to its 16-token blocks)."""
    extra = f"--tensor-parallel-size {tp} -pp={pp}"
    plan = kv_plan(_settings(vllm_extra_args=extra), _ernie(tmp_path))
    vllm = json.loads(engine(VLLM_KV_PROBE, tp, pp, GIB))
    assert plan.bytes_per_token == vllm["bytes_per_token"]
    assert plan.tokens is not None and vllm["tokens"] - 128 < plan.tokens <= vllm["tokens"]
    expected = {(1, 1): 58_240, (2, 1): 116_480, (8, 1): 116_480}
    if (tp, pp) in expected:
        assert plan.tokens == expected[(tp, pp)]


def test_per_gpu_geometry_replicates_heads_beyond_their_count() -> None:
    geometry = geometry_from_config(ERNIE_CONFIG)
    assert geometry is not None
    assert per_gpu(geometry, 8).kv_heads == 1 and per_gpu(geometry, 2).kv_heads == 1 and per_gpu(geometry).kv_heads == 2
    assert per_gpu(geometry, 1, 4).layers == 5  # 18 layers over 4 stages: the largest has 5


def test_parallel_sizes_read_from_the_engine_arguments() -> None:
    assert parallel_sizes("--tensor-parallel-size 2 --enforce-eager") == ParallelSizes(2, 1, 1)
    assert parallel_sizes("-tp 4 -pp=2 --data-parallel-size 2").gpus == 16
    assert parallel_sizes("") == ParallelSizes()
    with pytest.raises(ValueError, match="--tensor-parallel-size needs a positive integer"):
        parallel_sizes("--tensor-parallel-size two")


def test_ernie_weights_estimate_is_exact() -> None:
    assert weights_from_config(ERNIE_FULL, 2) == 360_748_032 * 2


def test_utilization_fits_beside_a_tenant_holding_12_gb_of_a_24_gb_card(tmp_path: Path,
                                                                        engine: Callable[..., str]) -> None:
    """A10 with 12 GB used by another process: the launcher's utilization passes vLLM's own ``request_memory``
    check even after vLLM's CUDA context (~0.5 GiB) is up, where vLLM's 0.92 default is refused."""
    gpus = from_nvml(FakeNvml(names=["NVIDIA A10"], total_bytes=A10_TOTAL, used_bytes=[12 * GB], reserved_bytes=0))
    settings = _settings(engine_python="python")
    resolved = _ernie(tmp_path)
    kv = kv_plan(settings, resolved)
    plan = gpu_plan(settings, ModelFacts(ERNIE_FULL, tmp_path), kv, gpus)
    assert plan.utilization is not None and plan.short_of() == []
    argv = launch.vllm_argv(settings, resolved, kv=kv, gpu_utilization=plan.utilization)
    util = float(argv[argv.index("--gpu-memory-utilization") + 1])
    assert util == plan.utilization and util < 0.2
    free_after_context = A10_TOTAL - 12 * GB - GIB // 2
    assert not engine(VLLM_REQUEST_PROBE, A10_TOTAL, free_after_context, util).startswith("refused")
    assert engine(VLLM_REQUEST_PROBE, A10_TOTAL, free_after_context, 0.92).startswith("refused")
    assert "--gpu-memory-utilization" in plan.describe() and "GPU 0 (NVIDIA A10)" in plan.describe()


def test_utilization_covers_weights_pool_and_headroom() -> None:
    card = DeviceMemory(0, "GPU-0", "A10", 20 * GIB, 3 * GIB)
    plan = memory_plan(2 * GIB, GIB, 1.0, ParallelSizes(2, 1, 1), [card, card])
    assert plan.need_bytes == GIB + GIB + GIB and plan.utilization == 0.15
    assert plan.short_of() == []
    tight = memory_plan(4 * GIB, GIB, 1.0, ParallelSizes(), [card])
    assert [d.index for d, _ in tight.short_of()] == [0]
    assert any("GPU 0 (A10)" in line and "[WARNING]" in line for line in tight.log_lines())


def test_a_utilization_in_extra_args_wins(tmp_path: Path) -> None:
    settings = _settings(engine_python="python", vllm_extra_args="--gpu-memory-utilization 0.5")
    argv = launch.vllm_argv(settings, _ernie(tmp_path), gpu_utilization=0.1)
    assert argv.count("--gpu-memory-utilization") == 1 and argv[argv.index("--gpu-memory-utilization") + 1] == "0.5"


def test_gpu_devices_reach_the_engine_in_pci_order() -> None:
    """GPU_DEVICES becomes vLLM's CUDA_VISIBLE_DEVICES; the GPU build numbers GPUs in PCI order (NVML's) whether or
    not GPU_DEVICES is set, so CUDA's device 0 is NVML's index 0 on a mixed host; the CPU build gets neither."""
    env = launch.vllm_env(_settings(gpu_devices="1"), "gpu", base={})
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    every = launch.vllm_env(_settings(), "gpu", base={"CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    assert every["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and "CUDA_VISIBLE_DEVICES" not in every
    assert "CUDA_DEVICE_ORDER" not in launch.vllm_env(_settings(), "cpu", base={})


def test_engine_versions_are_read_from_the_engine_interpreter() -> None:
    """The launcher records the engine's own Python, torch and CUDA runtime (None on the CPU build here), not its
    own: read from the engine interpreter without importing torch."""
    if not ENGINE_PY.exists():
        pytest.skip("no engine venv (.venvs/engine)")
    versions = engine_versions(str(ENGINE_PY))
    probe = subprocess.run([str(ENGINE_PY), "-c", "import torch, sys; print(torch.__version__, torch.version.cuda)"],
                           capture_output=True, text=True, timeout=300)
    torch_version, cuda = probe.stdout.split()
    assert versions["torch_version"] == torch_version and versions["cuda_runtime"] == (None if cuda == "None" else cuda)
    assert versions["python_version"] and versions["python_version"].startswith("3.")
    assert engine_versions("/nonexistent/python") == {}


def test_engine_versions_of_another_shape_are_unknown(tmp_path: Path) -> None:
    """An interpreter whose probe prints a JSON list (or a number) as its last line: no versions, no exception."""
    for last in ("[1, 2]", "7"):
        fake = tmp_path / "python"
        fake.write_text(f"#!/bin/sh\necho '{last}'\n")
        fake.chmod(0o755)
        assert engine_versions(str(fake)) == {}
