"""Local replicas and vllm-router under the stack's supervisord: the programs ``make up`` adds, their environment.

With REPLICAS=1 and no ENGINE_URLS the stack runs deploy/supervisord.conf as it is. Otherwise :func:`write_conf`
writes ``run/supervisord.conf``: that file plus one ``[program:vllm-K]`` per local replica K > 0 (``program:vllm``
is replica 0: the UI, the sidecar and ``make status`` keep reading its state file) and ``[program:router]``,
``vllm-router`` on VLLM_PORT in front of every engine (:func:`router_argv`). Each replica's launcher learns its
number from ENGINE_REPLICA and takes its port, log, state file and share of the GPUs or CPU cores from it
(:func:`replica_settings`).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import httpx

from core.replicas import replica_port, replicas, router_in_use, router_metrics_port, split_devices
from core.settings import Settings, get_settings

ROUTER_PROGRAM = "router"


def router_binary() -> str:
    """``vllm-router`` beside the app interpreter (the PyPI package in .venvs/app), else the one on PATH."""
    beside = Path(sys.executable).parent / "vllm-router"
    return str(beside) if beside.exists() else (shutil.which("vllm-router") or "vllm-router")


def router_argv(settings: Settings) -> list[str]:
    """``vllm-router`` on VLLM_HOST:VLLM_PORT with every engine as a worker, ROUTER_POLICY when set (the router's
    own default otherwise), its Prometheus endpoint on :func:`core.replicas.router_metrics_port`, and as long to wait
    for the workers as the stack waits for vLLM (STARTUP_TIMEOUT_S)."""
    argv = [router_binary(), "--host", settings.vllm_host, "--port", str(settings.vllm_port),
            "--worker-urls", *(r.url for r in replicas(settings))]  # fmt: skip
    if settings.router_policy:
        argv += ["--policy", settings.router_policy]
    return [*argv, "--prometheus-host", "127.0.0.1", "--prometheus-port", str(router_metrics_port(settings)),
            "--worker-startup-timeout-secs", str(int(settings.startup_timeout_s))]  # fmt: skip


def program_names(settings: Settings) -> list[str]:
    """supervisord programs of the local engines: ``vllm`` (replica 0), ``vllm-1``, ... (none with REPLICAS=0)."""
    return [r.name for r in replicas(settings) if r.local]


def replica_section(index: int) -> str:
    """``[program:vllm-K]``: the vLLM program of deploy/supervisord.conf for replica ``index`` (its own log)."""
    return f"""
[program:vllm-{index}]
command=%(ENV_APP_PYTHON)s -m engine.launcher
environment=ENGINE_REPLICA="{index}"
directory=%(ENV_PROJECT_ROOT)s
stdout_logfile=%(ENV_LOGS_DIR)s/vllm-{index}.log
stdout_logfile_maxbytes=%(ENV_STACK_VLLM_LOG_MAX_BYTES)s
stdout_logfile_backups=%(ENV_STACK_VLLM_LOG_BACKUPS)s
redirect_stderr=true
autorestart=false
startsecs=10
startretries=0
stopasgroup=true
killasgroup=true
stopwaitsecs=30
"""


def router_section(settings: Settings) -> str:
    """``[program:router]``: :func:`main` (``python -m engine.replicas``), which waits for the engines and then
    becomes :func:`router_argv` (its log: logs/router.log)."""
    return f"""
[program:{ROUTER_PROGRAM}]
command=%(ENV_APP_PYTHON)s -m engine.replicas
directory=%(ENV_PROJECT_ROOT)s
stdout_logfile=%(ENV_LOGS_DIR)s/router.log
stdout_logfile_maxbytes=10MB
stdout_logfile_backups=3
redirect_stderr=true
autorestart=false
startsecs=3
startretries=0
stopasgroup=true
killasgroup=true
"""


def conf_text(settings: Settings, base: str) -> str:
    """The supervisord configuration of the stack: ``base`` (deploy/supervisord.conf) as it is without the router;
    with it, ``program:vllm`` left out for REPLICAS=0, one section per further replica and the router's."""
    if not router_in_use(settings):
        return base
    if settings.replicas == 0:
        head, _, rest = base.partition("[program:vllm]")
        base = head + rest[rest.index("\n[program:") :]
    extra = "".join(replica_section(k) for k in range(1, settings.replicas))
    return base.rstrip("\n") + "\n" + extra + router_section(settings)


def write_conf(settings: Settings, base_path: Path) -> Path:
    """The configuration supervisord runs: ``base_path`` itself without the router, else :func:`conf_text` written
    to RUN_DIR/supervisord.conf (returned)."""
    if not router_in_use(settings):
        return base_path
    path = settings.run_dir / "supervisord.conf"
    path.write_text(conf_text(settings, base_path.read_text()), encoding="utf-8")
    return path


def usable_cores() -> list[str]:
    """This process's CPU cores (its affinity), as strings."""
    return [str(c) for c in sorted(os.sched_getaffinity(0))]


def replica_settings(settings: Settings, gpu_count: int = 0, cores: list[str] | None = None) -> Settings:
    """The settings of local replica ENGINE_REPLICA: its port (:func:`core.replicas.replica_port`) and, when more
    than one replica runs here, its share of the devices: GPU_DEVICES (or the host's ``gpu_count`` GPUs) split
    between the replicas on GPU hosts, else the CPU cores (``cores``, default this process's) as
    VLLM_CPU_OMP_THREADS_BIND — unless the user set that binding. Without the router: ``settings`` unchanged.

    Raises:
        ValueError: fewer GPUs or cores than replicas.
    """
    if not router_in_use(settings):
        return settings
    index = settings.engine_replica
    update: dict[str, object] = {"vllm_port": replica_port(settings, index), "vllm_base_url": None}
    if settings.replicas > 1:
        gpus = settings.gpu_devices.split(",") if settings.gpu_devices else [str(g) for g in range(gpu_count)]
        if gpus:
            update["gpu_devices"] = split_devices(gpus, settings.replicas)[index]
        elif not settings.vllm_cpu_omp_threads_bind:
            update["vllm_cpu_omp_threads_bind"] = split_devices(cores or usable_cores(), settings.replicas)[index]
            update["vllm_cpu_num_of_reserved_cpu"] = 0  # one core each: vLLM would keep it for its API server
    return settings.model_copy(update=update)


def wait_for_engines(settings: Settings, interval_s: float = 2.0) -> list[str]:
    """Wait until every engine answers ``GET /health`` (at most STARTUP_TIMEOUT_S); the URLs that never did.

    vllm-router starts serving as soon as one worker is healthy and opens its circuit breaker on a worker that
    fails while still starting (then re-checks it only every 60 s): started after the engines, it sends to all.
    """
    pending = [r.url for r in replicas(settings)]
    deadline = time.monotonic() + settings.startup_timeout_s
    while pending and time.monotonic() < deadline:
        for url in list(pending):
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    pending.remove(url)
            except httpx.HTTPError:
                pass
        if pending:
            time.sleep(interval_s)
    return pending


def main() -> int:
    """``python -m engine.replicas`` (``program:router``): wait for the engines (:func:`wait_for_engines`), then
    replace this process with vllm-router (:func:`router_argv`); exit 1 when an engine never answered."""
    settings = get_settings()
    argv = router_argv(settings)
    print(f"[INFO] waiting for the engines: {' '.join(r.url for r in replicas(settings))}", flush=True)
    missing = wait_for_engines(settings)
    if missing:
        print(f"[ERROR] not answering after {settings.startup_timeout_s:.0f} s: {' '.join(missing)}", flush=True)
        return 1
    print(f"[INFO] starting: {' '.join(argv)}", flush=True)
    os.execv(argv[0], argv)
    return 1  # not reached: execv replaces this process


if __name__ == "__main__":
    raise SystemExit(main())
