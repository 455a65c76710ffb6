"""`docker compose up` (and the Kubernetes manifests) on simulated GPU hosts, through every seam without a GPU.

The GPU compose file is rendered by Docker Compose itself (``docker compose config``, the app env's Compose binary, no
engine) as a fresh clone's ``.env`` (a copy of ``.env.example``) makes it, with what the user typed in the shell. Each
GPU-facing service's environment, command, user, mounts and GPU reservation become a container on a simulated host
(tests/unit/deploy/gpusim.py), and the real entry points run there: the engine container's ``python -m
engine.launcher`` up to the point it would exec vLLM (``--dry-run``: the preflight included) and the sidecar's GPU
reader as its server wires it. Hosts: 1 × A10, 2 × A10 with a 12 GB tenant, 8 × H100, an A10 on driver branches
525/535/545/550/570/580 (those through ``nvidia-smi``: no NVML in the engine image), an A10 another tenant fills.
Per host: vLLM sees exactly the GPUs compose reserved (CUDA_VISIBLE_DEVICES over the container's cards), the
preflight passes or names the fix, the caches lie in volumes, nothing is written on the read-only root, the sidecar
names the engine's GPUs, REPLICAS=2 splits them; and in vLLM 0.32's own code (the engine env): the argv parses with
its CLI parser and engine args, its environment holds no VLLM_* name vLLM does not know, and the planned
``--gpu-memory-utilization`` passes ``request_memory`` fed the free memory left after the CUDA context. Removing a
GPU-facing key from the compose file or the manifests fails these checks (the last tests).
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.settings import PROJECT_ROOT
from stack import compose_replicas
from tests.unit.deploy import gpusim_k8s as k8s
from tests.unit.deploy.containers_support import COMPOSE, DOCKERFILES, ENV_EXAMPLE, compose_cli
from tests.unit.deploy.gpusim import (
    CACHE_VARIABLES,
    VLLM_BASE_IMAGE_ENV,
    Container,
    EngineRun,
    SimHost,
    cards,
    compose_container,
    compose_gpus,
    dockerfile_env,
    image_writes,
    run_engine,
    run_sidecar,
)
from tests.unit.deploy.gpusim_vllm import VLLM_NAMES_PROBE, check_in_vllm, flag_value

A10, H100 = ("NVIDIA A10", 23_028), ("NVIDIA H100 80GB HBM3", 81_559)
GB = 10**9
ENGINE_IMAGE_ENV = {**VLLM_BASE_IMAGE_ENV, **dockerfile_env(DOCKERFILES[0], "AS gpu")}
APP_IMAGE_ENV = dockerfile_env(DOCKERFILES[1], "")  # its one stage
DRIVER_FIX = "install a driver ≥ 575.51.03 (CUDA 12.9) or the 535, 550, 560, 565 or 570 branch"
LOCAL_DOTENV = "\n".join(f"{name}=/home/me/.cache/{name.lower()}" for name in CACHE_VARIABLES)
"""A .env written for `make up` (one file for both modes): local cache folders, which compose must not take."""


@dataclass(frozen=True)
class Scenario:
    """A host, what the user typed (``host_env``: the shell; ``dotenv``: lines of .env) and what must come out:
    the fix the preflight names (None: vLLM starts), the host's cards each engine service's vLLM sees, the cards the
    sidecar reads, vLLM's tensor-parallel size."""

    name: str
    host: SimHost
    host_env: dict[str, str] = field(default_factory=dict)
    dotenv: str = ""
    refused: str | None = None
    engine_gpus: tuple[tuple[int, ...], ...] = ((0,),)
    sidecar_gpus: tuple[int, ...] = (0,)
    tensor_parallel: int = 1

    @property
    def replicas(self) -> int:
        """REPLICAS the user asked for."""
        return int(self.host_env.get("REPLICAS", "1"))


ONE_A10 = SimHost("a10x1", cards(*A10, 1), "570.172.08")
TWO_A10 = SimHost("a10x2-tenant", cards(*A10, 2, used={0: 12 * GB}), "550.163.01")
EIGHT_H100 = SimHost("h100x8", cards(*H100, 8), "580.82.07")
SCENARIOS = [
    Scenario("1xA10 fresh clone", ONE_A10),
    Scenario("2xA10 12 GB tenant on GPU 0", TWO_A10, engine_gpus=((0, 1),), sidecar_gpus=(0, 1)),
    Scenario("2xA10 tenant, GPU_DEVICES=1", TWO_A10, {"GPU_DEVICES": "1"}, engine_gpus=((1,),), sidecar_gpus=(1,)),
    Scenario("2xA10 tenant, tensor parallel 2", TWO_A10, {"ENGINE_TENSOR_PARALLEL_SIZE": "2"},
             engine_gpus=((0, 1),), sidecar_gpus=(0, 1), tensor_parallel=2),
    Scenario("8xH100 fresh clone", EIGHT_H100, engine_gpus=(tuple(range(8)),), sidecar_gpus=tuple(range(8))),
    Scenario("8xH100 REPLICAS=2", EIGHT_H100, {"REPLICAS": "2"}, engine_gpus=((0, 1, 2, 3), (4, 5, 6, 7)),
             sidecar_gpus=tuple(range(8))),
    Scenario("1xA10 .env of local mode", ONE_A10, dotenv=LOCAL_DOTENV),
    Scenario("1xA10 full (22 GB tenant)", SimHost("a10-full", cards(*A10, 1, used={0: 22 * GB}), "570.172.08"),
             refused="stop what else runs there (nvidia-smi)"),
    *(Scenario(f"1xA10 driver {driver}", SimHost(f"a10-{driver}", cards(*A10, 1), driver, nvml=False),
               refused=DRIVER_FIX if driver.startswith(("525", "545")) else None)
      for driver in ("525.147.05", "535.247.01", "545.29.06", "550.163.01", "570.172.08", "580.82.07")),
]  # fmt: skip


def render(tmp: Path, scenario: Scenario, compose_text: str | None = None) -> dict[str, Any]:
    """``docker compose config`` of the GPU compose file (``compose_text`` instead of it) for ``scenario``: the
    fresh clone's .env (.env.example plus ``dotenv``) for interpolation and env_file, the shell's variables, and with
    REPLICAS the override ``stack.compose_replicas`` writes (what scripts/compose.sh adds)."""
    tmp.mkdir(parents=True, exist_ok=True)
    compose = COMPOSE
    if compose_text is not None:
        compose = tmp / "docker-compose.yml"  # relative paths still from the checkout: --project-directory
        compose.write_text(compose_text, encoding="utf-8")
    dotenv = tmp / ".env"
    dotenv.write_text(ENV_EXAMPLE.read_text(encoding="utf-8") + "\n" + scenario.dotenv + "\n", encoding="utf-8")
    files = [compose, *([replicas_override(tmp, scenario, compose)] if scenario.replicas > 1 else [])]
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp), "APP_ENV_FILE": str(dotenv), **scenario.host_env}
    cmd = [*compose_cli(), "--project-directory", str(PROJECT_ROOT), "--env-file", str(dotenv),
           *(a for f in files for a in ("-f", str(f))), "config", "--format", "json"]  # fmt: skip
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    config: dict[str, Any] = json.loads(done.stdout)
    return config


def replicas_override(tmp: Path, scenario: Scenario, compose: Path) -> Path:
    """run/docker-compose.replicas.yml as ``python -m stack.compose_replicas`` writes it for ``scenario``."""
    from tests.unit.deploy.containers_support import settings_from

    with pytest.MonkeyPatch.context() as mp:
        settings = settings_from(scenario.host_env, mp)
        out = compose_replicas.write(settings, [str(compose)], tmp / "replicas.yml", len(scenario.host.gpus))
    assert out is not None
    return out


def engine_services(config: dict[str, Any]) -> list[str]:
    """The engine services (``vllm``, ``vllm-1`` ...), by replica number."""
    names = [n for n, s in config["services"].items() if (s.get("entrypoint") or [])[-1:] == ["engine.launcher"]]
    return sorted(names, key=lambda n: int(n.rpartition("-")[2]) if n != "vllm" else 0)


@dataclass
class Outcome:
    """What a scenario gave: each engine service's container and dry run, the sidecar's GPUs (host indices)."""

    engines: list[tuple[Container, EngineRun]]
    sidecar: list[int]
    gpu_services: list[str] = field(default_factory=list)


def simulate(tmp: Path, scenario: Scenario, compose_text: str | None = None) -> Outcome:
    """Render, then run every engine service's launcher and the sidecar's GPU reader on the scenario's host."""
    config = render(tmp, scenario, compose_text)
    host = scenario.host
    engines = []
    for name in engine_services(config):
        container = compose_container(config, name, host, ENGINE_IMAGE_ENV)
        engines.append((container, run_engine(container, host, tmp)))
    sidecar = compose_container(config, "sidecar", host, APP_IMAGE_ENV)
    uuids = run_sidecar(sidecar, host, tmp)
    gpu_facing = sorted(n for n in config["services"] if compose_gpus(config["services"][n], host))
    return Outcome(engines, [next(i for i, g in enumerate(host.gpus) if g.uuid == u) for u in uuids], gpu_facing)


def engine_problems(container: Container, run: EngineRun, host: SimHost, expect_gpus: tuple[int, ...],
                    refused: str | None, tensor_parallel: int, vllm_names: frozenset[str] | None) -> list[str]:  # fmt: skip
    """What is wrong with one engine container's dry run (empty: as expected)."""
    where = container.name
    if refused is not None:
        if run.code == 2 and refused in run.output:
            return []
        return [f"{where}: expected the launcher to refuse naming {refused!r}, got exit {run.code}: {run.output[-600:]}"]
    if run.code != 0 or run.argv is None or run.env is None:
        return [f"{where}: the launcher did not reach vLLM (exit {run.code}): {run.output[-800:]}"]
    out = [f"{where}: {line}" for line in run.output.splitlines() if line.startswith("[WARNING] preflight")]
    seen = tuple(host.gpus.index(g) for g in run.visible)
    if seen != expect_gpus:
        out.append(f"{where}: vLLM would see GPUs {seen} of the host, expected {expect_gpus}")
    if int(flag_value(run.argv, "--tensor-parallel-size") or 1) != tensor_parallel:
        out.append(f"{where}: tensor parallel size {flag_value(run.argv, '--tensor-parallel-size')}, "
                   f"expected {tensor_parallel}")  # fmt: skip
    if flag_value(run.argv, "--max-num-seqs") is None or flag_value(run.argv, "--gpu-memory-utilization") is None:
        out.append(f"{where}: no GPU batch limits or utilization in {run.argv}")
    for name in CACHE_VARIABLES:
        value = container.inside(run.env.get(name) or "")
        mount = container.mount_of(value) if value else None
        if mount is None or mount[1] == "tmpfs":
            out.append(f"{where}: {name}={value} is not in a volume ({mount[1] if mount else 'read-only image'})")
    if vllm_names is not None:
        unknown = sorted(n for n in run.env if n.startswith("VLLM_") and n not in vllm_names)
        if unknown:
            out.append(f"{where}: vLLM warns of unknown variables {unknown}")
    written = image_writes(container)
    if written:
        out.append(f"{where}: writes on the read-only root: {written[:5]}")
    return out


def problems(outcome: Outcome, scenario: Scenario, vllm_names: frozenset[str] | None) -> list[str]:
    """Every check of the module docstring for one compose scenario."""
    out = []
    if outcome.gpu_services != sorted([*(c.name for c, _ in outcome.engines), "sidecar"]):
        out.append(f"GPUs are reserved for {outcome.gpu_services}, expected the engines and the sidecar")
    expect = scenario.engine_gpus if scenario.refused is None else ((),) * scenario.replicas
    if len(outcome.engines) != scenario.replicas:
        out.append(f"{len(outcome.engines)} engine services, expected {scenario.replicas}")
    for (container, run), gpus in zip(outcome.engines, expect, strict=False):
        out += engine_problems(container, run, scenario.host, gpus, scenario.refused, scenario.tensor_parallel,
                               vllm_names)  # fmt: skip
    if tuple(outcome.sidecar) != scenario.sidecar_gpus:
        out.append(f"the sidecar reads GPUs {tuple(outcome.sidecar)}, expected {scenario.sidecar_gpus}")
    if scenario.replicas > 1:
        shares = [tuple(scenario.host.gpus.index(g) for g in c.gpus) for c, _ in outcome.engines]
        flat = [g for share in shares for g in share]
        if len(flat) != len(set(flat)) or sorted(flat) != list(range(len(scenario.host.gpus))):
            out.append(f"REPLICAS={scenario.replicas} shares the host's GPUs as {shares}")
    return out


@pytest.fixture(scope="module")
def vllm(engine_interpreter: Callable[..., str]) -> Callable[..., str]:
    """vLLM 0.32's own code: the engine env's interpreter (the suite's one, ``tests/unit/conftest.py``)."""
    return engine_interpreter


@pytest.fixture(scope="module")
def vllm_names(vllm: Callable[..., str]) -> frozenset[str]:
    """Every VLLM_* variable vLLM 0.32 knows (``vllm.envs.environment_variables``)."""
    return frozenset(json.loads(vllm(VLLM_NAMES_PROBE)))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """Every scenario simulated once."""
    return {s.name: simulate(tmp_path_factory.mktemp("sim"), s) for s in SCENARIOS}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_compose_on_a_simulated_host(scenario: Scenario, outcomes: dict[str, Outcome],
                                     vllm_names: frozenset[str]) -> None:  # fmt: skip
    """The GPU compose file's engine and sidecar on this host behave as the scenario says (module docstring)."""
    assert problems(outcomes[scenario.name], scenario, vllm_names) == []


def test_vllm_accepts_what_the_launcher_planned(outcomes: dict[str, Outcome], vllm: Callable[..., str],
                                                tmp_path: Path) -> None:  # fmt: skip
    """On every host that starts, vLLM 0.32's own CLI parser and engine args take the launcher's final argv (the
    tensor parallel size, batch limits, KV pool and context the plan meant), its environment check finds no
    unknown VLLM_* variable, and ``request_memory`` accepts the planned utilization on each GPU a rank uses with
    the free memory left after its CUDA context (and NCCL) — the 12 GB tenant included."""
    runs = {f"{s.name} / {c.name}": (c, r, s.tensor_parallel) for s in SCENARIOS if s.refused is None
            for c, r in outcomes[s.name].engines}  # fmt: skip
    assert len(runs) == 12  # 8 compose engines on 7 hosts that start, 4 drivers that pass
    assert check_in_vllm(vllm, runs, tmp_path) == {}


def test_vllms_own_check_refuses_vllms_default_beside_the_tenant(outcomes: dict[str, Outcome],
                                                                 vllm: Callable[..., str], tmp_path: Path) -> None:  # fmt: skip
    """The same engine argv with vLLM's default utilization (0.92, no --gpu-memory-utilization) is refused by
    ``request_memory`` beside the 12 GB tenant: the check above can fail."""
    [(container, run)] = outcomes["2xA10 12 GB tenant on GPU 0"].engines
    assert run.argv is not None
    at = run.argv.index("--gpu-memory-utilization")
    stripped = EngineRun(run.code, run.output, run.argv[:at] + run.argv[at + 2 :], run.env, run.visible)
    assert list(check_in_vllm(vllm, {"default": (container, stripped, 1)}, tmp_path)) == ["default"]


# --- Kubernetes ---------------------------------------------------------------------------------------------------
K8S_NODES = (ONE_A10, EIGHT_H100)


def k8s_problems(manifests: list[dict[str, Any]], host: SimHost, tmp: Path,
                 vllm_names: frozenset[str] | None) -> tuple[list[str], list[tuple[Container, EngineRun]]]:  # fmt: skip
    """The engine Deployment's and the GPU sidecar DaemonSet's pods on a cluster of one GPU node (``host``) and
    one CPU node: where they may run, what their entry points do there."""
    gpu, cpu = k8s.gpu_node(host), k8s.cpu_node()
    out: list[str] = []
    runs = []
    engine = k8s.workload(manifests, "Deployment", "vllm-engine")["spec"]["template"]["spec"]
    places = [n for n in (gpu, cpu) if k8s.schedulable(engine, n)]
    if places != [gpu]:
        out.append(f"the engine pods may run on {[n.name for n in places]}, expected only the GPU node")
    else:
        container = k8s.pod_container(manifests, engine, gpu, ENGINE_IMAGE_ENV)
        run = run_engine(container, host, tmp)
        runs.append((container, run))
        out += engine_problems(container, run, host, (0,), None, 1, vllm_names)
    sidecar = k8s.workload(manifests, "DaemonSet", "sidecar-gpu")["spec"]["template"]["spec"]
    places = [n for n in (gpu, cpu) if k8s.schedulable(sidecar, n)]
    if places != [gpu]:
        out.append(f"the GPU sidecars run on {[n.name for n in places]}, expected the GPU nodes only")
    else:
        read = run_sidecar(k8s.pod_container(manifests, sidecar, gpu, APP_IMAGE_ENV), host, tmp)
        if read != [g.uuid for g in host.gpus]:
            out.append(f"the GPU sidecar reads {read}, expected every GPU of its node")
    return out, runs


@pytest.mark.parametrize("host", K8S_NODES, ids=lambda h: h.label)
def test_kubernetes_on_a_simulated_gpu_node(host: SimHost, tmp_path: Path, vllm: Callable[..., str],
                                            vllm_names: frozenset[str]) -> None:  # fmt: skip
    """deploy/kubernetes on a GPU node (the GPU Operator's label and taint) beside a CPU node: the engine pods land
    on the GPU node only and see the one GPU they request, start there (preflight, caches in volumes, no service
    link variables reaching vLLM) with an argv and utilization vLLM's own code accepts; the GPU sidecars run on
    GPU nodes only and read every GPU of their node."""
    found, runs = k8s_problems(k8s.load(), host, tmp_path, vllm_names)
    assert found == []
    assert check_in_vllm(vllm, {c.name: (c, r, 1) for c, r in runs}, tmp_path) == {}


# --- removing a GPU-facing key fails the simulation ---------------------------------------------------------------
VLLM_ENV = ("GPU_DEVICES", "ENGINE_PREFLIGHT", "VLLM_EXTRA_ARGS", *CACHE_VARIABLES)
COMPOSE_KEYS: dict[tuple[str, ...], str] = {
    ("vllm", "environment", "GPU_DEVICES"): "2xA10 tenant, GPU_DEVICES=1",
    ("vllm", "environment", "ENGINE_PREFLIGHT"): "1xA10 driver 525.147.05",
    ("vllm", "environment", "VLLM_EXTRA_ARGS"): "2xA10 tenant, tensor parallel 2",
    **{("vllm", "environment", name): "1xA10 .env of local mode" for name in CACHE_VARIABLES},
    ("vllm", "deploy"): "1xA10 fresh clone",
    ("vllm", "volumes", "hf-cache:/cache/huggingface"): "1xA10 fresh clone",
    ("vllm", "volumes", "vllm-cache:/cache/vllm"): "1xA10 fresh clone",
    ("sidecar", "environment", "GPU_DEVICES"): "2xA10 tenant, GPU_DEVICES=1",
    ("sidecar", "deploy"): "1xA10 fresh clone",
}
"""Each GPU-facing key of docker-compose.yml and the simulated host that goes wrong without it."""
BY_NAME = {s.name: s for s in SCENARIOS}


def without(document: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """``document`` with the key (or list item) at ``path`` under ``services`` removed."""
    copied = copy.deepcopy(document)
    node = copied["services"]
    for key in path[:-1]:
        node = node[key]
    if isinstance(node, list):
        node.remove(path[-1])
    else:
        del node[path[-1]]
    return copied


def test_the_rewritten_compose_file_passes_as_the_original(tmp_path: Path, vllm_names: frozenset[str]) -> None:
    """The removal tests below rewrite docker-compose.yml through YAML: unchanged, the rewrite passes every host
    the removals are tried on (so a failure there is the removed key's)."""
    text = yaml.safe_dump(yaml.safe_load(COMPOSE.read_text(encoding="utf-8")), sort_keys=False)
    for n, name in enumerate(sorted(set(COMPOSE_KEYS.values()))):
        assert problems(simulate(tmp_path / str(n), BY_NAME[name], text), BY_NAME[name], vllm_names) == []


@pytest.mark.parametrize("path", list(COMPOSE_KEYS), ids=lambda p: ".".join(p))
def test_removing_a_gpu_facing_compose_key_fails_the_simulation(path: tuple[str, ...], tmp_path: Path,
                                                                vllm_names: frozenset[str]) -> None:  # fmt: skip
    """Each GPU-facing key of docker-compose.yml is load-bearing: without it its simulated host goes wrong."""
    scenario = BY_NAME[COMPOSE_KEYS[path]]
    text = yaml.safe_dump(without(yaml.safe_load(COMPOSE.read_text(encoding="utf-8")), path), sort_keys=False)
    assert problems(simulate(tmp_path, scenario, text), scenario, vllm_names), (path, scenario.name)


MANIFEST_KEYS = {
    "engine GPU request": ("engine.yaml", r"\n +nvidia\.com/gpu: 1", "", EIGHT_H100),
    "engine toleration": ("engine.yaml", r"\n      tolerations:\n(?:        .*\n)+?(?=      securityContext)", "\n",
                          ONE_A10),
    "engine enableServiceLinks": ("engine.yaml", r"\n      enableServiceLinks: false", "", ONE_A10),
    "engine hf-cache mount": ("engine.yaml", r"\n            - name: hf-cache\n              mountPath: \S+", "",
                              ONE_A10),
    "engine vllm-cache mount": ("engine.yaml", r"\n            - name: vllm-cache\n              mountPath: \S+", "",
                                ONE_A10),
    "sidecar NVIDIA_VISIBLE_DEVICES": ("sidecar-gpu.yaml", r"\n            - name: NVIDIA_VISIBLE_DEVICES\n\s+value: all",
                                       "", ONE_A10),
    "sidecar nodeSelector": ("sidecar-gpu.yaml", r"\n      nodeSelector:\n        \S+: \"true\"", "", ONE_A10),
    "sidecar toleration": ("sidecar-gpu.yaml", r"\n      tolerations:\n(?:        .*\n)+?(?=      securityContext)",
                           "\n", ONE_A10),
}  # fmt: skip
"""Kubernetes keys whose removal changes what a GPU pod sees, and the node where it shows (the engine's
nodeSelector changes nothing there: its GPU request already keeps it off CPU nodes; scripts/check_kubernetes.py
requires it)."""


@pytest.mark.parametrize("key", list(MANIFEST_KEYS))
def test_removing_a_gpu_facing_manifest_key_fails_the_simulation(key: str, tmp_path: Path,
                                                                 vllm_names: frozenset[str]) -> None:  # fmt: skip
    """Each GPU-facing key of deploy/kubernetes is load-bearing: without it the simulated cluster goes wrong."""
    name, pattern, replacement, host = MANIFEST_KEYS[key]
    text = (k8s.MANIFESTS / name).read_text(encoding="utf-8")
    edited, count = re.subn(pattern, replacement, text)
    assert count >= 1, f"{pattern!r} not in {name}"
    assert k8s_problems(k8s.load({name: edited}), host, tmp_path, vllm_names)[0], key
