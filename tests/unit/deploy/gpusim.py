"""Simulated GPU hosts for the GPU-facing containers (tests/unit/deploy/test_gpu_host_sim.py).

A :class:`SimHost` is a set of cards (model, memory, used memory, UUID) and a driver. A :class:`Container` is what
one GPU-facing service of ``docker compose config`` (or one Kubernetes pod) is on that host: its environment (the
image's ENV under the service's), its mounts (folders under a per-container root; every other path is the image's
read-only root), its user, and the GPUs the NVIDIA runtime gives it (renumbered from 0, as NVML inside sees them).
:func:`run_engine` runs the engine container's real entry, ``python -m engine.launcher``, in-process with
``--dry-run`` (preflight included, nothing started): NVML is a :class:`tests.fakes.FakeNvml` of the container's GPUs
(or absent, so that the fake ``nvidia-smi`` on its PATH answers), the hub is unreachable, the interpreter is the GPU
image's (no vLLM CPU build, CUDA 12.9 torch). :func:`run_sidecar` wires the sidecar's GPU reader as its server does.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from core.gpus import DeviceMemory, select_devices
from core.settings import PROJECT_ROOT, Settings, get_settings
from engine.model_resolve import HubProbe, ModelResolutionError
from engine.synthetic import VARIANTS
from tests.fakes import FakeNvml
from tests.unit.deploy.containers_support import JIT_CACHES, dockerfile_stages, service_command

GB = 10**9
MIB = 2**20
VLLM_BASE_IMAGE_ENV = {
    # vllm/vllm-openai (nvidia/cuda base): the NVIDIA runtime gives a container every GPU when nothing else says which
    # (a pod without an nvidia.com/gpu request on a node whose default runtime is nvidia), and vLLM's own image marks
    # its usage reports.
    "NVIDIA_VISIBLE_DEVICES": "all",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    "VLLM_USAGE_SOURCE": "production-docker-image",
}
IMAGE_VERSIONS = {"python_version": "3.12.11", "torch_version": "2.9.0+cu129", "cuda_runtime": "12.9"}
"""What the GPU image's interpreter reports (engine.engineplan.engine_versions): torch built for CUDA 12.9."""
CACHE_VARIABLES = ("HF_HOME", "VLLM_CACHE_ROOT", *JIT_CACHES)
"""Where the engine keeps what must outlive a restart: each must lie in a volume (not tmpfs, not the image)."""
ERNIE = VARIANTS["ernie-4.5-0.3b"]
ERNIE_CONFIG = {"architectures": ["Ernie4_5ForCausalLM"], "hidden_size": ERNIE.hidden_size,
                "num_hidden_layers": ERNIE.num_hidden_layers, "num_attention_heads": ERNIE.num_attention_heads,
                "num_key_value_heads": ERNIE.num_key_value_heads, "head_dim": ERNIE.head_dim,
                "intermediate_size": ERNIE.intermediate_size, "vocab_size": ERNIE.vocab_size,
                "max_position_embeddings": ERNIE.max_position_embeddings, "tie_word_embeddings": True,
                "torch_dtype": "bfloat16"}  # fmt: skip


@dataclass(frozen=True)
class SimGpu:
    """One card: NVML name, total and used memory (bytes; used: other tenants), UUID (the host's identity)."""

    name: str
    total_bytes: int
    used_bytes: int
    uuid: str


@dataclass(frozen=True)
class SimHost:
    """Cards in PCI order, the driver version, and whether the engine image's NVML answers (else nvidia-smi)."""

    label: str
    gpus: tuple[SimGpu, ...]
    driver: str
    nvml: bool = True


def cards(name: str, total_mib: int, count: int, used: Mapping[int, int] | None = None, tag: str = "") -> tuple[SimGpu, ...]:
    """``count`` cards of one model, ``used`` bytes held by other tenants by index."""
    used = used or {}
    tag = tag or "-".join(name.lower().split()[1:])
    return tuple(SimGpu(name, total_mib * MIB, used.get(i, 0), f"GPU-{tag}-{i:04d}") for i in range(count))


@dataclass
class Container:
    """One GPU-facing container on a host (see the module docstring)."""

    name: str
    env: dict[str, str]
    argv: list[str]
    user: tuple[int, int]
    mounts: dict[str, str]  # container path -> volume, bind or tmpfs
    gpus: tuple[SimGpu, ...]
    root: Path = field(default=Path("/nonexistent"))

    def path(self, inside: str) -> Path:
        """Where a container path lies here (every path is under :attr:`root`)."""
        return self.root / inside.lstrip("/")

    def inside(self, value: str) -> str:
        """A path as the container names it (the processes here see it under :attr:`root`)."""
        root = str(self.root)
        return "/" + value[len(root) :].lstrip("/") if value == root or value.startswith(root + "/") else value

    def mount_of(self, inside: str) -> tuple[str, str] | None:
        """``(mount point, kind)`` holding the container path ``inside``; None: the image's read-only root."""
        best = max((m for m in self.mounts if inside == m or inside.startswith(m.rstrip("/") + "/")), key=len,
                   default=None)  # fmt: skip
        return (best, self.mounts[best]) if best else None


def dockerfile_env(path: Path, stage_from: str) -> dict[str, str]:
    """ENV of the Dockerfile stage whose FROM names ``stage_from`` (``AS gpu``); PATH left out (set by the run)."""
    for stage in dockerfile_stages(path):
        if stage_from in stage[0][1]:
            env: dict[str, str] = {}
            for keyword, args in stage:
                if keyword == "ENV":
                    env.update(word.split("=", 1) for word in shlex.split(args) if "=" in word)  # type: ignore[misc]
            env.pop("PATH", None)
            return env
    raise AssertionError(f"{path} has no stage FROM ... {stage_from}")


def compose_gpus(service: Mapping[str, Any], host: SimHost) -> tuple[SimGpu, ...]:
    """The cards Docker gives a compose service: its ``deploy.resources.reservations.devices`` (``count: all`` or
    ``device_ids``, NVML indices of the host); none without a reservation (runc ignores NVIDIA_VISIBLE_DEVICES)."""
    devices = (((service.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or []
    out: list[SimGpu] = []
    for device in devices:
        if device.get("driver") != "nvidia" or "gpu" not in (device.get("capabilities") or []):
            continue
        if device.get("device_ids"):
            out += [host.gpus[int(i)] for i in device["device_ids"]]
        elif device.get("count") in (-1, "all"):
            out += list(host.gpus)
        else:
            out += list(host.gpus[: int(device.get("count") or 0)])
    return tuple(out)


def compose_container(config: Mapping[str, Any], name: str, host: SimHost, image_env: dict[str, str]) -> Container:
    """A service of ``docker compose config --format json`` on ``host``: image ENV under the service's environment,
    entrypoint + command, user, volumes and tmpfs as mounts, its reserved GPUs."""
    service = config["services"][name]
    env = {**image_env, **{k: "" if v is None else str(v) for k, v in (service.get("environment") or {}).items()}}
    mounts = {v["target"]: v["type"] for v in service.get("volumes") or []}
    mounts.update({t.split(":", 1)[0]: "tmpfs" for t in service.get("tmpfs") or []})
    uid, _, gid = str(service.get("user") or "1000:1000").partition(":")
    command = [str(w).replace("$$", "$") for w in service.get("command") or []]  # config keeps compose's escape
    argv = service_command({**service, "command": command})[0]  # unwrapped from bash -c 'exec CMD > >(...)'
    return Container(name, env, argv, (int(uid), int(gid or uid)), mounts, compose_gpus(service, host))


def fake_nvml(gpus: tuple[SimGpu, ...], driver: str) -> FakeNvml:
    """NVML inside a container given ``gpus``: numbered from 0, the host's UUIDs, no driver reservation."""
    return FakeNvml(names=[g.name for g in gpus], used_bytes=[g.used_bytes for g in gpus] or [0], driver=driver,
                    reserved_bytes=0, uuids=[g.uuid for g in gpus], totals=[g.total_bytes for g in gpus])  # fmt: skip


def write_fake_smi(folder: Path, gpus: tuple[SimGpu, ...], driver: str) -> None:
    """An ``nvidia-smi`` answering engine.gpuplan's CSV query for ``gpus`` (MiB), and failing without any."""
    rows = [f"{i}, {g.uuid}, {g.name}, {g.total_bytes // MIB}, {(g.total_bytes - g.used_bytes) // MIB}, {driver}"
            for i, g in enumerate(gpus)]  # fmt: skip
    body = "\n".join(rows)
    script = f"#!/bin/sh\ncat <<'EOF'\n{body}\nEOF\n" if rows else "#!/bin/sh\necho 'No devices were found' >&2\nexit 6\n"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nvidia-smi").write_text(script)
    (folder / "nvidia-smi").chmod(0o755)


def prepare(container: Container, tmp: Path) -> None:
    """Lay out the container's file system under ``tmp``: the mounts (writable by anyone, as the volumes are by the
    app user and tmpfs by mode 1777), the image's data, and the ERNIE config in the hf-cache volume's HF cache."""
    container.root = tmp / container.name
    for point in container.mounts:
        container.path(point).mkdir(parents=True, exist_ok=True)
        container.path(point).chmod(0o777)
    data = container.path("/app/loadgen/workloads")
    data.mkdir(parents=True, exist_ok=True)
    (data / "data").symlink_to(PROJECT_ROOT / "loadgen" / "workloads" / "data")
    cache = container.path("/cache/huggingface")
    if container.mount_of("/cache/huggingface"):  # a warm hf-cache volume (the app user's, as the image makes it)
        hub = cache / "hub" / "models--baidu--ERNIE-4.5-0.3B-PT"
        snapshot = hub / "snapshots" / "0123456789abcdef"
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text(json.dumps(ERNIE_CONFIG))
        (hub / "refs").mkdir()
        (hub / "refs" / "main").write_text("0123456789abcdef")
        for folder, _dirs, _files in os.walk(cache):
            Path(folder).chmod(0o777)


def image_writes(container: Container) -> list[str]:
    """Files written outside the mounts (the image's root is read-only in compose: they would have failed)."""
    out = []
    for folder, _dirs, files in os.walk(container.root):  # not into the image data's symlink
        for name in files:
            inside = "/" + str((Path(folder) / name).relative_to(container.root))
            if container.mount_of(inside) is None and not inside.startswith("/.bin/"):
                out.append(inside)
    return out


def _host_path(container: Container, value: str) -> str:
    if value.startswith("/") and ":" not in value and not value.startswith(("/usr", "/bin", "/dev", "/proc")):
        return str(container.path(value))
    return value


@contextlib.contextmanager
def inside(container: Container, nvml: bool = True, driver: str = "") -> Iterator[pytest.MonkeyPatch]:
    """This process as the container's: its environment only (paths mapped under its root, its fake nvidia-smi on
    PATH), its NVML, its user, the GPU image's interpreter, no .env, no network, its own network namespace."""
    from huggingface_hub import constants

    import engine.doctor
    import engine.engineplan
    import engine.launcher

    with pytest.MonkeyPatch.context() as mp:
        write_fake_smi(container.root / ".bin", container.gpus, driver)
        for name in list(os.environ):
            mp.delenv(name)
        for name, value in container.env.items():
            mp.setenv(name, _host_path(container, value))
        mp.setenv("PATH", f"{container.root / '.bin'}{os.pathsep}/usr/bin{os.pathsep}/bin")
        mp.setitem(sys.modules, "pynvml", fake_nvml(container.gpus, driver) if nvml else None)
        mp.setitem(Settings.model_config, "env_file", None)
        hf_home = os.environ.get("HF_HOME") or str(container.path("/home/app/.cache/huggingface"))
        mp.setattr(constants, "HF_HUB_CACHE", os.environ.get("HF_HUB_CACHE") or os.path.join(hf_home, "hub"))
        mp.setattr(engine.engineplan, "PROJECT_ROOT", container.path("/app"))  # the image's /app has no .venvs
        mp.setattr(engine.engineplan, "probe_hub", lambda *_a, **_k: HubProbe(None, "simulated host: no network"))
        mp.setattr(engine.engineplan, "fetch_config", lambda *_a, **_k: (None, "simulated host: no network"))
        mp.setattr(engine.doctor, "engine_versions", lambda _python: dict(IMAGE_VERSIONS))
        mp.setattr(engine.doctor, "port_in_use_message", lambda *_a: None)  # the container's own network

        def no_build(*_a: object) -> None:
            raise ModelResolutionError("simulated host: the synthetic model would be built (model not in the cache)")

        mp.setattr(engine.launcher, "build_synthetic", no_build)
        mp.setattr(os, "getuid", lambda: container.user[0])
        mp.setattr(os, "getgid", lambda: container.user[1])
        mp.chdir(container.path("/app"))
        get_settings.cache_clear()
        try:
            yield mp
        finally:
            get_settings.cache_clear()


@dataclass
class EngineRun:
    """The launcher's dry run in a container: exit code, output, vLLM's argv and environment (None when it did not
    get that far), and the GPUs (host cards) vLLM would see, in CUDA's order."""

    code: int
    output: str
    argv: list[str] | None
    env: dict[str, str] | None
    visible: tuple[SimGpu, ...] = ()


def run_engine(container: Container, host: SimHost, tmp: Path) -> EngineRun:
    """``python -m engine.launcher --dry-run`` (the container's command with ``--dry-run``) in ``container``."""
    from engine import launcher

    assert container.argv[-2:] == ["-m", "engine.launcher"], container.argv
    prepare(container, tmp)
    out, err = io.StringIO(), io.StringIO()
    with inside(container, host.nvml, host.driver), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = launcher.main(["--dry-run"])
    text = out.getvalue()
    lines = text.strip().splitlines()
    plan = json.loads(lines[-1]) if code == 0 and lines else {}
    run = EngineRun(code, text + err.getvalue(), plan.get("argv"), plan.get("env"))
    if run.env is not None:
        assert run.env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID", "CUDA would number GPUs fastest first, not as NVML"
        seen = [DeviceMemory(i, g.uuid, g.name, g.total_bytes) for i, g in enumerate(container.gpus)]
        chosen = select_devices(run.env.get("CUDA_VISIBLE_DEVICES"), seen)
        run.visible = tuple(container.gpus[d.index] for d in chosen)
    return run


def run_sidecar(container: Container, host: SimHost, tmp: Path) -> list[str]:
    """UUIDs of the GPUs the sidecar's reports name, its GPU reader wired as ``python -m sidecar.server`` wires it."""
    from sidecar.reports.writer import ReportService

    assert container.argv[-2:] == ["-m", "sidecar.server"], container.argv
    prepare(container, tmp)
    with inside(container, True, host.driver):
        service = ReportService.from_settings(get_settings(), server_facts=lambda _url: {})
        info = service.gpu_reader.info() if service.gpu_reader else None
        samples = service.gpu_reader.read() if service.gpu_reader else []
    if info is None:
        return []
    assert [s.index for s in samples] == info.indices and len(service.sampler.gpu_names) == len(info.indices)
    return [u or "" for u in info.uuids]
