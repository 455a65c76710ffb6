"""Make this machine look like an AVX2-only x86 host to torch and vLLM's CPU build (no AVX-512, no AVX512-BF16, no
AMX), to reproduce what the stack's engine does on such hosts (docs/benchmarks.md, "The seed's commands on the
stack's defaults"). Benchmark aid only: never used by the stack itself.

Use it for one engine start, with ATen's and oneDNN's own ISA caps beside it::

    SIMULATE_AVX2=1 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 PYTHONPATH=$PWD/benchmarks/avx2sim make up

vLLM picks its kernels (``vllm._C_AVX2``) and the stack picks its dtype from ``torch.cpu._is_avx512_*`` and the CPU
flags; this module makes the former answer False in every process of the engine (each imports ``sitecustomize`` at
start). The stack reads ``/proc/cpuinfo`` for its dtype, so give ``VLLM_DTYPE`` to choose the one to measure.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType

AVX512_PROBES = ("_is_avx512_supported", "_is_avx512_bf16_supported", "_is_avx512_vnni_supported",
                 "_is_amx_tile_supported", "_is_amx_fp16_supported")  # fmt: skip


def _no_avx512(module: ModuleType) -> None:
    for name in AVX512_PROBES:
        if hasattr(module, name):
            setattr(module, name, lambda: False)


class _TorchCpuFinder(importlib.abc.MetaPathFinder):
    """Patches ``torch.cpu`` right after it is imported."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch.cpu":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            _no_avx512(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("SIMULATE_AVX2") == "1":
    sys.meta_path.insert(0, _TorchCpuFinder())
