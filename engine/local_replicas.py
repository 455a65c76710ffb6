"""Local replicas and vllm-router under the stack's supervisord: the programs ``make up`` adds, their environment,
and the router's worker list at run time.

Without the router in front (``ENGINE_SWITCH=restart``, one engine) deploy/supervisord.conf runs as it is. Otherwise
:func:`write_conf` writes ``run/supervisord.conf``: per local replica K a program for each of its two slots
(:mod:`core.slots`: ``vllm``/``vllm-b`` for replica 0, ``vllm-K``/``vllm-K-b``; slot b starts only on a switch) and
``[program:router]``, vllm-router on VLLM_PORT (:func:`router_argv`). Each launcher takes its port, log, state file
and device share from ENGINE_REPLICA and ENGINE_SLOT (:func:`replica_settings`). A switch changes the router's
workers at run time (:func:`add_worker`, :func:`remove_worker`).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import httpx

from core.enginestate import EngineError
from core.knobs import client_host
from core.net import wait_for_http
from core.replicas import (
    front_in_use,
    replica_port,
    replicas,
    router_in_use,
    router_metrics_port,
    split_devices,
)
from core.settings import Settings, get_settings
from core.slots import SLOTS, Slot, active_slot, slot_suffix

ROUTER_PROGRAM = "router"
FRONT_POLICY = "round_robin"
"""The router's policy in front of one engine: its default (cache_aware) asks the engine to render each chat first."""
ROUTER_ADMIN_TIMEOUT_S = 10.0
"""Longest call to the router's worker API, s (it health-checks a new worker: ~50 ms)."""
REMOVE_TRIES, REMOVE_RETRY_S = 5, 0.5
"""How often, and how far apart (s), a removal is asked while the router still lists the worker."""


def router_binary() -> str:
    """``vllm-router`` beside the app interpreter (the PyPI package in .venvs/app), else the one on PATH."""
    beside = Path(sys.executable).parent / "vllm-router"
    return str(beside) if beside.exists() else (shutil.which("vllm-router") or "vllm-router")


def router_argv(settings: Settings) -> list[str]:
    """``vllm-router`` on VLLM_HOST:VLLM_PORT with every engine as a worker, ROUTER_POLICY (else the
    router's default; :data:`FRONT_POLICY` in front of one engine), its metrics on
    :func:`core.replicas.router_metrics_port` and STARTUP_TIMEOUT_S to wait for the workers."""
    argv = [router_binary(), "--host", settings.vllm_host, "--port", str(settings.vllm_port),
            "--worker-urls", *(r.url for r in replicas(settings))]  # fmt: skip
    if settings.router_policy:
        argv += ["--policy", settings.router_policy]
    elif not router_in_use(settings):  # one engine behind the front: no choice to make, and its default policy
        argv += ["--policy", FRONT_POLICY]  # (cache_aware) asks the engine to render every chat first
    return [*argv, "--prometheus-host", "127.0.0.1", "--prometheus-port", str(router_metrics_port(settings)),
            "--worker-startup-timeout-secs", str(int(settings.startup_timeout_s))]  # fmt: skip


def program_name(index: int, slot: Slot = "a") -> str:
    """supervisord program (and log/state file stem) of replica ``index``'s slot: ``vllm``, ``vllm-b``, ``vllm-1`` …"""
    return ("vllm" if index == 0 else f"vllm-{index}") + slot_suffix(slot)


def program_names(settings: Settings) -> list[str]:
    """supervisord programs of the local engines that serve now (their active slots); none with REPLICAS=0."""
    front = front_in_use(settings)
    return [program_name(r.index, active_slot(settings.run_dir, r.index) if front else "a")
            for r in replicas(settings) if r.index is not None]  # fmt: skip


def replica_section(index: int, slot: Slot = "a") -> str:
    """``[program:vllm-K]`` (``-b``: slot b, started only on a switch) for replica ``index``'s slot."""
    name = program_name(index, slot)
    return f"""
[program:{name}]
command=%(ENV_APP_PYTHON)s -m engine.launcher
environment=ENGINE_REPLICA="{index}",ENGINE_SLOT="{slot}"
directory=%(ENV_PROJECT_ROOT)s
stdout_logfile=%(ENV_LOGS_DIR)s/{name}.log
stdout_logfile_maxbytes=%(ENV_STACK_VLLM_LOG_MAX_BYTES)s
stdout_logfile_backups=%(ENV_STACK_VLLM_LOG_BACKUPS)s
redirect_stderr=true
autostart={"true" if slot == "a" else "false"}
autorestart=false
startsecs=10
startretries=0
stopasgroup=true
killasgroup=true
stopwaitsecs=30
"""


ROUTER_SECTION = f"""
[program:{ROUTER_PROGRAM}]
command=%(ENV_APP_PYTHON)s -m engine.local_replicas
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
"""``[program:router]``: :func:`main`, which waits for the engines, then becomes vllm-router."""


def conf_text(settings: Settings, base: str) -> str:
    """The stack's supervisord configuration: ``base`` as it is without the router in front; with it, base's
    ``program:vllm`` replaced by both slots of every local replica, and the router's section."""
    if not front_in_use(settings):
        return base
    head, _, rest = base.partition("[program:vllm]")
    base = head + rest[rest.index("\n[program:") :]
    extra = "".join(replica_section(k, slot) for k in range(settings.replicas) for slot in SLOTS)
    return base.rstrip("\n") + "\n" + extra + ROUTER_SECTION


def write_conf(settings: Settings, base_path: Path) -> Path:
    """The configuration supervisord runs: ``base_path``, or with the router :func:`conf_text` in RUN_DIR."""
    if not front_in_use(settings):
        return base_path
    path = settings.run_dir / "supervisord.conf"
    path.write_text(conf_text(settings, base_path.read_text()), encoding="utf-8")
    return path


def usable_cores() -> list[str]:
    """This process's CPU cores (its affinity), as strings."""
    return [str(c) for c in sorted(os.sched_getaffinity(0))]


def replica_settings(settings: Settings, gpu_count: int = 0, cores: list[str] | None = None) -> Settings:
    """The settings of local replica ENGINE_REPLICA in slot ENGINE_SLOT: its port and, with more than
    one replica, its share of GPU_DEVICES (or of ``gpu_count`` GPUs), else of the CPU cores (``cores``, default this
    process's) as VLLM_CPU_OMP_THREADS_BIND unless the user set it. Without the router in front: unchanged.

    Raises:
        ValueError: fewer GPUs or cores than replicas.
    """
    if not front_in_use(settings):
        return settings
    index = settings.engine_replica
    update: dict[str, object] = {"vllm_port": replica_port(settings, index, settings.engine_slot or "a"),
                                 "vllm_base_url": None}  # fmt: skip
    if settings.replicas > 1:
        gpus = settings.gpu_devices.split(",") if settings.gpu_devices else [str(g) for g in range(gpu_count)]
        if gpus:
            update["gpu_devices"] = split_devices(gpus, settings.replicas)[index]
        elif not settings.vllm_cpu_omp_threads_bind:
            update["vllm_cpu_omp_threads_bind"] = split_devices(cores or usable_cores(), settings.replicas)[index]
            update["vllm_cpu_num_of_reserved_cpu"] = 0  # one core each: vLLM would keep it for its API server
    return settings.model_copy(update=update)


def wait_for_engines(settings: Settings, interval_s: float = 2.0) -> list[str]:
    """Wait until every engine answers ``GET /health`` (at most STARTUP_TIMEOUT_S); the URLs that never
    did. vllm-router sidelines a worker that fails while starting for 60 s, so it starts after the engines.
    """
    deadline = time.monotonic() + settings.startup_timeout_s
    return [
        r.url
        for r in replicas(settings)
        if not wait_for_http(f"{r.url}/health", deadline - time.monotonic(), interval_s=interval_s)[0]
    ]


def front_url(settings: Settings) -> str:
    """The router's own URL on this host (a wildcard VLLM_HOST as 127.0.0.1), for its worker API."""
    return f"http://{client_host(settings.vllm_host)}:{settings.vllm_port}"


def _admin(settings: Settings, verb: str, url: str) -> None:
    """``POST /<verb>?url=<url>`` on the router; adding a worker it already lists is no error.

    Raises:
        EngineError: the router did not answer, or answered other than 200 (quoted).
    """
    try:
        answer = httpx.post(f"{front_url(settings)}/{verb}", params={"url": url}, timeout=ROUTER_ADMIN_TIMEOUT_S)
    except httpx.HTTPError as exc:
        where = front_url(settings)
        raise EngineError(f"the router at {where} did not answer /{verb} ({type(exc).__name__}: {exc})") from None
    if answer.status_code != 200 and not (verb == "add_worker" and "already exists" in answer.text):
        raise EngineError(f"the router refused /{verb}?url={url}: HTTP {answer.status_code} {answer.text[:300]}")


def add_worker(settings: Settings, url: str) -> None:
    """Put the engine at ``url`` behind the router (:func:`_admin`)."""
    _admin(settings, "add_worker", url)


def remove_worker(settings: Settings, url: str, tries: int = REMOVE_TRIES) -> None:
    """Send no new request to the engine at ``url`` (what it was sent it still answers), asked again
    while the router still lists it: vllm-router 0.1.17 once answered 200 and kept the worker.

    Raises:
        EngineError: as :func:`_admin`, or the router still lists ``url`` after ``tries`` removals.
    """
    for _ in range(tries):
        _admin(settings, "remove_worker", url)
        workers = router_workers(settings)
        if workers is None or url not in workers:  # None: no list to check, the 200 is all there is
            return
        time.sleep(REMOVE_RETRY_S)
    raise EngineError(f"the router still lists {url} after {tries} /remove_worker calls that it answered with 200")


def router_workers(settings: Settings) -> list[str] | None:
    """The engines the router sends to (``GET /list_workers``); None when it does not say."""
    try:
        answer = httpx.get(f"{front_url(settings)}/list_workers", timeout=ROUTER_ADMIN_TIMEOUT_S)
        urls = answer.json().get("urls") if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return [u for u in urls if isinstance(u, str)] if isinstance(urls, list) else None


def main() -> int:
    """``program:router``: wait for the engines, then exec vllm-router; 1 when an engine never answered."""
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
