"""Replicas in compose: the override file that turns ``docker compose``'s one engine into N behind vllm-router.

``scripts/compose.sh`` runs ``python -m stack.compose_replicas`` before every compose command: with REPLICAS above 1
(or ENGINE_URLS) it writes ``run/docker-compose.replicas.yml`` and prints its path (added to COMPOSE_FILE); with
REPLICAS=1 and no ENGINE_URLS it removes it; with neither set an existing file is the running stack's and is kept.
The plan is ``REPLICAS=N make up``'s (:func:`engine.local_replicas.replica_settings`): replica K on
REPLICA_PORT_BASE+K with its share of the GPUs (``device_ids``) or, on the CPU overlay, of the cores.

The override holds ``vllm`` (replica 0, no published port), ``vllm-1`` … (copies of the merged ``vllm`` service,
variables left for Compose to fill in, so no secret is written), ``router`` (``python -m engine.local_replicas`` in
the app image, publishing VLLM_PORT) and the clients pointed at the router; locust-master also gets the cluster knobs
for the per-replica cross-check (:mod:`core.serverview_cluster`).
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from core.replicas import router_in_use
from core.settings import Settings, get_settings, secret_env_names
from engine.gpuplan import parallel_sizes
from engine.local_replicas import replica_settings, usable_cores

OVERRIDE_NAME = "docker-compose.replicas.yml"
OVERRIDE_STEM = "docker-compose.replicas"
"""scripts/compose.sh writes run/docker-compose.replicas.yml, or ...-<COMPOSE_PROJECT_NAME>.yml."""
ROUTER_SERVICE = "router"
CLIENT_SERVICES = ("ui", "sidecar", "locust-master", "locust-worker")
"""Services that reach the engine through VLLM_BASE_URL: pointed at the router."""
BENCHMARK_SERVICE = "locust-master"
ROUTER_SECRETS = frozenset({"VLLM_API_KEY"})
"""The one secret the router keeps (it forwards requests to engines that may require the key)."""


@dataclass(frozen=True)
class ComposeReplica:
    """One engine service of the plan: name, port, GPU ids (empty on the CPU overlay) and CPU binding (or None)."""

    service: str
    index: int
    port: int
    gpus: tuple[str, ...]
    cpu_bind: str | None


@dataclass
class Tagged:
    """A YAML value written with a Compose merge tag (``!reset``, ``!override``)."""

    tag: str
    value: Any


def _represent_tagged(dumper: yaml.SafeDumper, data: Tagged) -> yaml.Node:
    node = dumper.represent_data(data.value)
    node.tag = data.tag
    return node


class _Dumper(yaml.SafeDumper):
    """SafeDumper that writes :class:`Tagged` values with their tag."""


_Dumper.add_representer(Tagged, _represent_tagged)


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads Compose's merge tags as :class:`Tagged` values."""


def _construct_tagged(loader: yaml.SafeLoader, node: yaml.Node) -> Tagged:
    if isinstance(node, yaml.MappingNode):
        return Tagged(node.tag, loader.construct_mapping(node, deep=True))
    if isinstance(node, yaml.SequenceNode):
        return Tagged(node.tag, loader.construct_sequence(node, deep=True))
    assert isinstance(node, yaml.ScalarNode)
    return Tagged(node.tag, loader.construct_scalar(node))


for _tag in ("!reset", "!override"):
    _Loader.add_constructor(_tag, _construct_tagged)


def load_compose_file(path: Path) -> dict[str, Any]:
    """A compose file as YAML: anchors merged, variables as written, merge tags as :class:`Tagged`.

    Raises:
        OSError: unreadable. yaml.YAMLError: not YAML.
    """
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader) or {}


def merge(base: Any, over: Any) -> Any:
    """``over`` merged into ``base`` as Compose merges files: mappings key by key, ``!reset`` removes (``!reset {}``
    or ``[]`` empties), ``!override`` and other values replace."""
    if isinstance(over, Tagged):
        return copy.deepcopy(over.value)
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for key, value in over.items():
            if isinstance(value, Tagged) and value.tag == "!reset" and not value.value:
                out.pop(key, None)
            else:
                out[key] = merge(base.get(key), value)
        return out
    return copy.deepcopy(over)


def cluster_settings(settings: Settings) -> Settings:
    """``settings`` with the cluster knobs taken as they are here (not from a ``make up`` stack's record)."""
    knobs = ("replicas", "replica_port_base", "engine_urls", "router_policy", "replica_hosts")
    fixed = settings.model_copy()
    fixed.__pydantic_fields_set__.update(knobs)
    return fixed


def plan(settings: Settings, gpu: bool, gpu_count: int = 0, cores: list[str] | None = None) -> list[ComposeReplica]:
    """The engine services of REPLICAS=N in compose (``vllm``, ``vllm-1`` …), each with its port and share of
    GPU_DEVICES (else of ``gpu_count`` GPUs) when ``gpu``, else of ``cores`` (default this process's), split as ``make
    up`` splits them; empty without the router.

    Raises:
        ValueError: REPLICAS=0, fewer GPUs or cores than replicas, a replica with fewer GPUs than its tensor ×
            pipeline parallel size, or an ENGINE_URLS entry that is no URL.
    """
    settings = cluster_settings(settings)
    if not router_in_use(settings):
        return []
    if settings.replicas < 1:
        raise ValueError("REPLICAS=0 (a router only) is not a compose layout: run the router with `make up` instead")
    cores = cores if cores is not None else usable_cores()
    tensor = int(os.environ.get("ENGINE_TENSOR_PARALLEL_SIZE") or 1)
    sizes = parallel_sizes(f"--tensor-parallel-size {tensor} {settings.vllm_extra_args}")
    out = []
    for k in range(settings.replicas):
        one = replica_settings(settings.model_copy(update={"engine_replica": k}), gpu_count if gpu else 0,
                               [] if gpu else cores)  # fmt: skip
        gpus = tuple(one.gpu_devices.split(",")) if gpu and one.gpu_devices else ()
        if gpu and settings.replicas > 1 and len(gpus) < sizes.tensor * sizes.pipeline:
            raise ValueError(
                f"replica {k} gets GPU(s) {','.join(gpus) or 'none'} but vLLM runs with tensor x pipeline parallel "
                f"size {sizes.tensor * sizes.pipeline}: give more GPUs (GPU_DEVICES) or fewer REPLICAS"
            )
        bind = None if gpu or settings.vllm_cpu_omp_threads_bind else one.vllm_cpu_omp_threads_bind
        out.append(ComposeReplica("vllm" if k == 0 else f"vllm-{k}", k, one.vllm_port, gpus, bind))
    return out


def _gpu_deploy(gpus: tuple[str, ...]) -> dict[str, Any]:
    return {"resources": {"reservations": {"devices": [
        {"driver": "nvidia", "device_ids": list(gpus), "capabilities": ["gpu"]}]}}}  # fmt: skip


def replica_environment(replica: ComposeReplica) -> dict[str, str]:
    """What a replica container sets over ``vllm``'s environment: its number, port and device share."""
    env = {"ENGINE_REPLICA": str(replica.index), "REPLICAS": "1", "ENGINE_URLS": "", "REPLICA_HOSTS": "",
           "VLLM_PORT": str(replica.port), "VLLM_BASE_URL": f"http://127.0.0.1:{replica.port}"}  # fmt: skip
    if replica.gpus:
        env["GPU_DEVICES"] = ""
    if replica.cpu_bind is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = replica.cpu_bind
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
    return env


def cluster_environment(settings: Settings, engines: list[ComposeReplica]) -> dict[str, str]:
    """The cluster knobs the router and the benchmark read (:mod:`core.replicas`): the replicas by service name."""
    return {"REPLICAS": str(len(engines)), "REPLICA_PORT_BASE": str(settings.replica_port_base),
            "REPLICA_HOSTS": ",".join(r.service for r in engines), "ENGINE_URLS": settings.engine_urls or "",
            "ROUTER_POLICY": settings.router_policy or ""}  # fmt: skip


def router_service(base: Mapping[str, Any], settings: Settings, engines: list[ComposeReplica]) -> dict[str, Any]:
    """The ``router`` service: the app image, hardened, publishing VLLM_PORT once every engine is healthy."""
    ui = base["services"]["ui"]
    env = dict(base["x-container-env"])
    env.update({name: "" for name in sorted(secret_env_names() - ROUTER_SECRETS)})
    env.update(cluster_environment(settings, engines))
    log = 'exec python -m engine.local_replicas > >(exec python -m stack.logsink "$${LOGS_DIR}/router.log" ' \
          "--max-mb 10 --backups 3) 2>&1"  # fmt: skip
    return {
        **copy.deepcopy(base["x-hardening"]),
        "build": copy.deepcopy(ui["build"]),
        "image": ui["image"],
        "command": ["/bin/bash", "-c", log],
        "env_file": copy.deepcopy(ui["env_file"]),
        "environment": env,
        "ports": ["${PUBLISH_HOST:-127.0.0.1}:${VLLM_PORT:-8100}:${VLLM_PORT:-8100}"],
        "volumes": ["./logs:/app/logs"],
        "tmpfs": ["/tmp:size=64m,mode=1777"],
        "mem_limit": "${ROUTER_MEM_LIMIT:-2g}",
        "cpus": "${ROUTER_CPUS:-2}",
        "pids_limit": "${ROUTER_PIDS_LIMIT:-512}",
        "depends_on": {r.service: {"condition": "service_healthy"} for r in engines},
        "init": True,
        "healthcheck": {
            "test": ["CMD-SHELL", "python -c \"import urllib.request; "
                     "urllib.request.urlopen('http://127.0.0.1:$${VLLM_PORT}/health', timeout=5)\""],
            "interval": "15s", "timeout": "10s", "retries": 5, "start_period": "60s"},
        "restart": "on-failure:3",
        "stop_grace_period": "30s",
    }  # fmt: skip


def override(files: list[dict[str, Any]], settings: Settings, engines: list[ComposeReplica]) -> dict[str, Any]:
    """The override document for ``files`` (the compose files in use, base first) and the plan ``engines``."""
    base = files[0]
    vllm: dict[str, Any] = {}
    for doc in files:
        vllm = merge(vllm, (doc.get("services") or {}).get("vllm") or {})
    services: dict[str, Any] = {}
    for replica in engines:
        env = replica_environment(replica)
        if replica.index == 0:
            spec: dict[str, Any] = {"environment": env, "ports": Tagged("!reset", [])}
            if replica.gpus:
                spec["deploy"] = Tagged("!override", _gpu_deploy(replica.gpus))
        else:
            spec = copy.deepcopy(vllm)
            spec.pop("ports", None)
            spec["environment"] = {**spec.get("environment", {}), **env}
            if replica.gpus:
                spec["deploy"] = _gpu_deploy(replica.gpus)
        services[replica.service] = spec
    services[ROUTER_SERVICE] = router_service(base, settings, engines)
    port = "${VLLM_PORT:-8100}"
    for name in CLIENT_SERVICES:
        env = {"VLLM_BASE_URL": f"${{EXTERNAL_VLLM_URL:-http://{ROUTER_SERVICE}:{port}}}"}
        if name == BENCHMARK_SERVICE:
            env.update(cluster_environment(settings, engines))
        services[name] = {"environment": env, "depends_on": {ROUTER_SERVICE: {"condition": "service_healthy"}}}
    return {"services": services}


def dump(document: Mapping[str, Any]) -> str:
    """The override as YAML text, merge tags kept, with a header saying where it comes from."""
    head = (
        "# Generated by `python -m stack.compose_replicas` (scripts/compose.sh) from REPLICAS, GPU_DEVICES,\n"
        "# REPLICA_PORT_BASE, ENGINE_URLS and ROUTER_POLICY: do not edit, it is rewritten before each compose run.\n"
    )
    return head + yaml.dump(dict(document), Dumper=_Dumper, sort_keys=False, width=200)


def write(
    settings: Settings, file_names: list[str], out: Path, gpu_count: int | None = None, cores: list[str] | None = None
) -> Path | None:
    """Write the override for the compose files ``file_names`` (the CPU overlay among them: cores are split,
    else GPUs) to ``out`` and return it; without the router remove ``out`` and return None. With neither REPLICAS nor
    ENGINE_URLS set, an existing ``out`` is the running stack's and is kept. ``gpu_count``: default counted;
    ``cores``: default this process's.

    Raises:
        ValueError: what :func:`plan` refuses. OSError: a file cannot be read or written.
    """
    if out.exists() and not {"replicas", "engine_urls"} & settings.model_fields_set:
        return out  # the running stack's shape: later commands (ps, exec, down) see its services without REPLICAS
    gpu = not any(Path(name).name == "docker-compose.cpu.yml" for name in file_names)
    if gpu and gpu_count is None and not settings.gpu_devices and router_in_use(cluster_settings(settings)):
        from engine.gpuplan import host_gpus

        gpu_count = len(host_gpus().devices)
    engines = plan(settings, gpu, gpu_count or 0, cores)
    if not engines:
        out.unlink(missing_ok=True)
        return None
    bases = [name for name in file_names if not Path(name).name.startswith(OVERRIDE_STEM)]
    docs = [load_compose_file(Path(name)) for name in bases]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dump(override(docs, settings, engines)), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m stack.compose_replicas [--files a.yml:b.yml] [--out PATH]``: write (or remove) the override and
    print its path; exit 2 with the reason when the plan is refused."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", default=os.environ.get("COMPOSE_FILE", "docker-compose.yml"))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--gpus", type=int, default=None, help="the host's GPU count (default: counted)")
    parser.add_argument("--cores", default=None, help="CPU cores to split, comma-separated (default: this process's)")
    args = parser.parse_args(argv)
    settings = get_settings()
    out = args.out or settings.run_dir / OVERRIDE_NAME
    kept = out.exists() and not {"replicas", "engine_urls"} & settings.model_fields_set
    try:
        cores = args.cores.split(",") if args.cores else None
        path = write(settings, [f for f in args.files.split(":") if f], out, args.gpus, cores)
    except ValueError as exc:
        print(f"[ERROR] {exc}", file=sys.stderr)
        return 2
    if path is not None:
        what = "the running stack's replicas" if kept else f"{settings.replicas} engine replicas"
        print(f"[INFO] {what} behind vllm-router on VLLM_PORT ({path})", file=sys.stderr)
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
