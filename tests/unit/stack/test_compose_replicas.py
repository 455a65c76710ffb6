"""Replicas in compose: the generated override's plan (GPU and core split, ports, tensor parallelism), and the real
Compose binary's view of the base files plus the override (services, devices, router, healthchecks, dependencies,
hardening as the other services, the engine URLs the benchmark learns)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from core.replicas import replicas
from core.settings import Settings
from engine.local_replicas import router_argv
from stack.compose_replicas import OVERRIDE_NAME, ComposeReplica, plan, write
from tests.scripts import script_module
from tests.unit.deploy.containers_support import COMPOSE, COMPOSE_CPU, resolved_config, settings_from

HARDENING = ("user", "cap_drop", "security_opt", "read_only", "logging")


def make(**values: Any) -> Settings:
    """Settings from ``values`` only (no .env, a run folder of their own: no stack's cluster record)."""
    values.setdefault("run_dir", Path(tempfile.mkdtemp(prefix="compose-replicas-")))
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_one_replica_writes_no_override_and_removes_an_old_one(tmp_path: Path) -> None:
    """REPLICAS=1 without ENGINE_URLS: no plan, and an earlier override is removed, so the stack is today's."""
    out = tmp_path / OVERRIDE_NAME
    out.write_text("services: {}\n")
    assert plan(make(), gpu=True, gpu_count=4) == []
    assert write(make(replicas=1), [str(COMPOSE)], out, gpu_count=4) is None
    assert not out.exists()


def test_gpus_are_split_contiguously_with_ports_from_the_replica_base() -> None:
    """GPU_DEVICES=0,1,2,3, REPLICAS=2: vllm gets 0,1 on 8110, vllm-1 gets 2,3 on 8111 (as `make up` splits)."""
    engines = plan(make(replicas=2, gpu_devices="0,1,2,3"), gpu=True)
    assert engines == [ComposeReplica("vllm", 0, 8110, ("0", "1"), None),
                       ComposeReplica("vllm-1", 1, 8111, ("2", "3"), None)]  # fmt: skip
    three = plan(make(replicas=2, replica_port_base=9000), gpu=True, gpu_count=3)
    assert [(r.gpus, r.port) for r in three] == [(("0", "1"), 9000), (("2",), 9001)]
    uuids = plan(make(replicas=2, gpu_devices="GPU-a,GPU-b"), gpu=True)
    assert [r.gpus for r in uuids] == [("GPU-a",), ("GPU-b",)]


def test_fewer_gpus_than_replicas_or_than_tensor_parallelism_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """One GPU for two replicas, or a share smaller than tensor x pipeline parallelism, is refused with the reason."""
    with pytest.raises(ValueError, match="cannot be split"):
        plan(make(replicas=2), gpu=True, gpu_count=1)
    monkeypatch.setenv("ENGINE_TENSOR_PARALLEL_SIZE", "2")
    assert [r.gpus for r in plan(make(replicas=2), gpu=True, gpu_count=4)] == [("0", "1"), ("2", "3")]
    with pytest.raises(ValueError, match="tensor x pipeline parallel size 2"):
        plan(make(replicas=2), gpu=True, gpu_count=3)
    monkeypatch.delenv("ENGINE_TENSOR_PARALLEL_SIZE")
    with pytest.raises(ValueError, match="parallel size 4"):
        plan(make(replicas=2, vllm_extra_args="--tensor-parallel-size 4"), gpu=True, gpu_count=4)
    with pytest.raises(ValueError, match="REPLICAS=0"):
        plan(make(replicas=0, engine_urls="http://gpu2:8000"), gpu=True, gpu_count=4)


def test_cpu_overlay_binds_each_replica_to_its_cores_unless_the_user_does() -> None:
    """On the CPU overlay each replica gets its share of the cores; a binding the user set is left alone."""
    engines = plan(make(replicas=2), gpu=False, cores=["0", "1", "2", "3"])
    assert [(r.gpus, r.cpu_bind) for r in engines] == [((), "0,1"), ((), "2,3")]
    own = plan(make(replicas=2, vllm_cpu_omp_threads_bind="0-3"), gpu=False, cores=["0", "1"])
    assert [r.cpu_bind for r in own] == [None, None]


def test_engine_urls_alone_put_the_router_in_front_of_one_local_engine() -> None:
    """REPLICAS=1 with ENGINE_URLS: the router fronts the local engine and the remote ones; the one local engine
    keeps the base file's GPU reservation and GPU_DEVICES (no split: empty ``gpus``)."""
    engines = plan(make(engine_urls="http://gpu2:8000"), gpu=True, gpu_count=2)
    assert [(r.service, r.port, r.gpus) for r in engines] == [("vllm", 8110, ())]


def override_config(tmp_path: Path, gpu: bool, **knobs: Any) -> dict[str, Any]:
    """``docker compose config`` (the real binary) of the base files plus the override the knobs generate."""
    files = [COMPOSE] if gpu else [COMPOSE, COMPOSE_CPU]
    out = write(make(**knobs), [str(p) for p in files], tmp_path / OVERRIDE_NAME, gpu_count=4, cores=["0", "1"])
    assert out is not None
    return resolved_config(*files, out)


def check_hardening() -> ModuleType:
    """scripts/check_hardening.py as a module."""
    return script_module("check_hardening")


def test_compose_config_of_two_gpu_replicas_behind_the_router(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Base + override through the real Compose binary: two engines with their own GPUs and ports, the router on
    VLLM_PORT after both are healthy, every client after the router, hardening as the other services."""
    config = override_config(tmp_path, gpu=True, replicas=2, router_policy="round_robin")
    services = config["services"]
    assert {"vllm", "vllm-1", "router", "ui", "sidecar", "locust-master", "locust-worker"} == set(services)
    for name, port, gpus in (("vllm", 8110, ["0", "1"]), ("vllm-1", 8111, ["2", "3"])):
        engine = services[name]
        devices = engine["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "device_ids": gpus, "capabilities": ["gpu"]}], name
        env = engine["environment"]
        assert (env["VLLM_PORT"], env["ENGINE_REPLICA"], env["REPLICAS"], env["GPU_DEVICES"]) == (
            str(port),
            name.partition("-")[2] or "0",
            "1",
            "",
        )
        assert "--tensor-parallel-size 1" in env["VLLM_EXTRA_ARGS"]
        assert "ports" not in engine, "the router publishes VLLM_PORT, not an engine"
        assert engine["healthcheck"]["test"][0] == "CMD-SHELL" and "/health" in engine["healthcheck"]["test"][1]
        for key in (*HARDENING, "tmpfs", "mem_limit", "pids_limit", "image", "entrypoint", "volumes", "shm_size"):
            assert engine.get(key) == services["vllm"].get(key), (name, key)
    router = services["router"]
    assert router["command"][:2] == ["/bin/bash", "-c"] and "python -m engine.local_replicas" in router["command"][2]
    assert "router.log" in router["command"][2]
    assert router["image"] == services["ui"]["image"]
    assert [(p["target"], p["published"], p["host_ip"]) for p in router["ports"]] == [(8100, "8100", "127.0.0.1")]
    assert router["depends_on"] == {n: {"condition": "service_healthy", "required": True} for n in ("vllm", "vllm-1")}
    assert "/health" in router["healthcheck"]["test"][1]
    for key in HARDENING:
        assert router[key] == services["ui"][key], key
    assert router["environment"]["HF_TOKEN"] == "" and router["environment"]["SIDECAR_TOKEN"] == ""
    for name in ("ui", "sidecar", "locust-master", "locust-worker"):
        assert services[name]["depends_on"]["router"]["condition"] == "service_healthy", name
        assert services[name]["environment"]["VLLM_BASE_URL"] == "http://router:8100", name
    assert check_hardening().compose_problems(config) == []

    # What the router and the benchmark make of their environments: the engines by service name.
    run_dir = str(tmp_path / "run")
    argv = router_argv(settings_from({**router["environment"], "RUN_DIR": run_dir}, monkeypatch))
    workers = argv[argv.index("--worker-urls") + 1 : argv.index("--policy")]
    assert workers == ["http://vllm:8110", "http://vllm-1:8111"] and argv[argv.index("--policy") + 1] == "round_robin"
    bench = settings_from({**services["locust-master"]["environment"], "RUN_DIR": run_dir}, monkeypatch)
    assert [(r.name, r.url) for r in replicas(bench)] == [
        ("vllm", "http://vllm:8110"),
        ("vllm-1", "http://vllm-1:8111"),
    ]


def test_compose_config_of_cpu_replicas_keeps_the_cpu_overlay(tmp_path: Path) -> None:
    """On the CPU overlay every replica is the CPU engine image (no GPU reservation), bound to its own core, with the
    CPU overlay's KV_CACHE_GB (blank unless given)."""
    services = override_config(tmp_path, gpu=False, replicas=2)["services"]
    for name, core in (("vllm", "0"), ("vllm-1", "1")):
        engine = services[name]
        assert engine["image"].endswith("-cpu") and engine["build"]["target"] == "cpu", name
        assert "deploy" not in engine or not engine["deploy"].get("resources"), name
        assert engine["environment"]["VLLM_CPU_OMP_THREADS_BIND"] == core
        assert engine["environment"]["KV_CACHE_GB"] == ""  # blank: unset, the launcher sizes it for the dtype


def test_later_commands_keep_the_running_stacks_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without REPLICAS or ENGINE_URLS anywhere, an existing override is the running stack's and is kept; REPLICAS=1
    set removes it."""
    out = tmp_path / OVERRIDE_NAME
    assert write(make(replicas=2), [str(COMPOSE)], out, gpu_count=2) == out
    before = out.read_text()
    assert write(make(), [str(COMPOSE)], out, gpu_count=2) == out and out.read_text() == before
    assert write(make(replicas=1), [str(COMPOSE)], out, gpu_count=2) is None and not out.exists()
