"""The GPU memory budget of ERNIE-4.5-0.3B at the stack's defaults, checked with NVML where it can be without vLLM.

What vLLM holds on the card at the defaults is its CUDA context, the weights, the KV pool of exactly
``--kv-cache-memory-bytes`` (KV_CACHE_GB) and a small rest (activations of the largest batch, CUDA graphs, the
sampler's logits). A fresh process here creates a CUDA context and allocates the first three (bf16 weights of
ERNIE-4.5-0.3B's 360.7 M parameters, and the pool the launcher would request); NVML's device reading must stay under
the seed's 2.8 GB (10**9 bytes, the seed's unit; not GiB) less the budget the README leaves for the rest. The
engine itself, CUDA graphs and sampler included, is measured by ``test_engine_defaults.py``. Marked ``gpu``; skipped
without a GPU and CUDA torch.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from core.settings import Settings
from core.units import GIB
from engine.kvsizing import GPU_DTYPE, pool_gib
from sidecar.sampling.gpu import open_gpu_reader

pytestmark = pytest.mark.gpu

ERNIE_PARAMS = 360_748_032  # the synthetic model's exact count, equal to ERNIE-4.5-0.3B-PT's
SEED_GPU_BUDGET_BYTES = 2.8e9  # the seed's "2.8 GB": 10**9 bytes
REST_BUDGET_BYTES = 0.45 * GIB  # activations, CUDA graphs, sampler: the README's allowance beyond context + weights + KV

PROBE = r"""
import json, sys, time
import pynvml
pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
used = lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used
before = used()
import torch
torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
context = used()
weights = torch.empty(int(sys.argv[1]), dtype=torch.bfloat16, device="cuda")
kv = torch.empty(int(sys.argv[2]), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize(); time.sleep(0.2)
after = used()
print(json.dumps({"before": before, "context": context, "after": after}))
"""


@pytest.fixture(scope="module")
def readings() -> dict[str, int]:
    reader, reason = open_gpu_reader()
    if reader is None:
        pytest.skip(f"no GPU here: {reason}")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    kv_bytes = int(pool_gib(Settings(_env_file=None, vllm_dtype=GPU_DTYPE)) * GIB)  # type: ignore[call-arg]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(ERNIE_PARAMS), str(kv_bytes)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    values: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    values["kv"] = kv_bytes
    print(f"\n[gpu] NVML readings (bytes): {values}")
    return values


def test_nvml_sees_the_kv_pool_and_weights(readings: dict[str, int]) -> None:
    """NVML's reading grows by the weights and the pool (within 64 MiB of rounding), so the report's peak shows them."""
    grown = readings["after"] - readings["context"]
    expected = ERNIE_PARAMS * 2 + readings["kv"]
    assert expected <= grown <= expected + 64 * 1024**2, (grown, expected)


def test_context_weights_and_pool_fit_the_seed_budget(readings: dict[str, int]) -> None:
    """CUDA context + ERNIE-4.5-0.3B's bf16 weights + the default KV pool leave the README's allowance for the rest
    under the seed's 2.8 GB."""
    used_bytes = readings["after"] - readings["before"]
    assert used_bytes + REST_BUDGET_BYTES < SEED_GPU_BUDGET_BYTES, used_bytes
