"""``make doctor``: why the GPU stack would not start, before anything starts — one line per failure, with its fix.

``python -m engine.doctor [--in-container]``, run by ``make doctor``, by ``make up`` on GPU hosts and by the compose
engine's entry (``--in-container``: no Container Toolkit or host port checks). Checks the host driver against the
image's CUDA build (:data:`DRIVER_RULES`), the NVIDIA Container Toolkit, each GPU's free memory against what vLLM
will request (:mod:`engine.gpuplan`, with the predicted peak of :mod:`engine.gpupeak`), ``logs/``, ``reports/`` and
``models/`` writable by APP_UID/APP_GID, the HF cache and HF_TOKEN, and the stack's ports (host only). Exit 0 when
nothing failed, else 1; no GPU at all is no failure (the CPU build runs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.gpus import select_devices
from core.net import port_in_use_message
from core.pipes import guard_stdout
from core.settings import Settings, get_settings
from core.units import GIB
from engine.engineplan import engine_python, engine_versions, gpu_plan, kv_plan, model_facts, resolve
from engine.gpuplan import HostGpus, host_gpus
from engine.kvsizing import KvSizingError, for_host
from engine.local_control import Supervisor
from engine.model_resolve import ModelResolutionError


@dataclass(frozen=True)
class DriverRule:
    """What a vLLM image's CUDA build asks of the host's (Linux) driver.

    The Container Toolkit starts the container only when the image's ``NVIDIA_REQUIRE_CUDA`` label holds
    (libnvidia-container ``src/cli/dsl.c``): ``cuda>=X`` (a driver ≥ ``cuda_driver``) OR one of the label's data-centre
    exception ``branches`` (not GeForce). The CUDA runtime then needs at least ``runtime_driver`` (minor-version
    compatibility).
    """

    cuda: str
    cuda_driver: str
    branches: tuple[int, ...]
    runtime_driver: str

    def passes(self, driver: str) -> bool:
        """Whether the toolkit starts the image on ``driver`` (``535.183.01``) and its CUDA runtime runs there."""
        have = _version(driver)
        label = have >= _version(self.cuda_driver) or (bool(have) and have[0] in self.branches)
        return label and have >= _version(self.runtime_driver)

    def describe(self) -> str:
        """The drivers that pass, in words: ``≥ 575.51.03 (CUDA 12.9) or the 535, 550, 560, 565 or 570 branch``."""
        floor = max(self.cuda_driver, self.runtime_driver, key=_version)
        branches = [str(b) for b in self.branches if _version(self.runtime_driver)[0] < b < _version(floor)[0]]
        text = f"≥ {floor} (CUDA {self.cuda})"
        if not branches:
            return text
        listed = branches[0] if len(branches) == 1 else f"{', '.join(branches[:-1])} or {branches[-1]}"
        return f"{text} or the {listed} branch"


DRIVER_RULES = {
    # vLLM's -cu129 images (nvidia/cuda 12.9.1 base): NVIDIA_REQUIRE_CUDA=cuda>=12.9 with the 535, 550, 560, 565 and
    # 570 branches as exceptions; CUDA 12.9 needs 575.51.03 (CUDA toolkit release notes); CUDA 12.x runs on ≥ 525.60.13.
    # So 525, 545 and 555 hosts are refused although CUDA 12.9 itself would run there.
    "cu129": DriverRule("12.9", "575.51.03", (535, 550, 560, 565, 570), "525.60.13"),
    # vLLM's CUDA 13 images: cuda>=13.0 with exceptions up to the 575 branch, but CUDA 13.x itself needs ≥ 580.65.06.
    "cu130": DriverRule("13.0", "580.65.06", (535, 550, 565, 570, 575), "580.65.06"),
}
"""The driver rule of each image CUDA build (:func:`image_cuda`)."""
TOOLKIT_TOOLS = ("nvidia-ctk", "nvidia-container-runtime", "nvidia-container-cli")


@dataclass(frozen=True)
class Finding:
    """One check's outcome: ``ok`` or a failure whose ``text`` names what is wrong and the fix."""

    check: str
    ok: bool
    text: str

    def line(self) -> str:
        """``[ OK ] check: text`` or ``[FAIL] check: text``."""
        return f"[{' OK ' if self.ok else 'FAIL'}] {self.check}: {self.text}"


def image_cuda(base: str, runtime: str | None = None) -> str:
    """``cu129`` or ``cu130``: from the engine's CUDA runtime when known, else the image tag (``vX-cu129``)."""
    if runtime:
        return "cu129" if runtime.startswith("12.") else "cu130"
    tag = base.split("@")[0].rsplit(":", 1)[-1]
    return "cu129" if tag.endswith(("-cu129", "-cu128", "-cu126")) else "cu130"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def check_driver(gpus: HostGpus, image_cuda: str) -> Finding:
    """The host driver against the :data:`DRIVER_RULES` of ``image_cuda``; the fix names the drivers that
    pass, and the -cu129 image where that would run."""
    rule = DRIVER_RULES[image_cuda]
    have = gpus.driver_version
    if have is None:
        return Finding("driver", False, f"driver version unknown ({gpus.reason}); install an NVIDIA driver "
                       f"{rule.describe()}")
    if not rule.passes(have):
        cu129 = DRIVER_RULES["cu129"]
        other = (f"set VLLM_GPU_BASE=vllm/vllm-openai:v0.32.0-cu129 (runs on {cu129.describe()}) and rebuild, or "
                 if image_cuda != "cu129" and cu129.passes(have) else "")
        return Finding(
            "driver",
            False,
            f"driver {have} cannot run the {image_cuda} vLLM image, which needs a driver {rule.describe()} (the "
            f"Container Toolkit checks its NVIDIA_REQUIRE_CUDA label): {other}install a driver {rule.describe()}",
        )
    return Finding("driver", True, f"{have} runs the {image_cuda} image ({rule.describe()})")


def check_toolkit(which: Callable[[str], str | None] = shutil.which) -> Finding:
    """The NVIDIA Container Toolkit, which gives containers the GPUs."""
    found = [tool for tool in TOOLKIT_TOOLS if which(tool)]
    if not found:
        return Finding(
            "container toolkit",
            False,
            "NVIDIA Container Toolkit not found (no nvidia-ctk): install nvidia-container-toolkit and run "
            "`sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker`",
        )
    return Finding("container toolkit", True, ", ".join(found))


def check_memory(settings: Settings, gpus: HostGpus) -> list[Finding]:
    """Free memory of each GPU the engine will use against what vLLM will request there."""
    chosen = select_devices(settings.gpu_devices, gpus.devices)
    if not chosen:
        return [Finding("GPU selection", False, f"GPU_DEVICES={settings.gpu_devices!r} names no GPU of this host "
                        f"({', '.join(d.label for d in gpus.devices)}): use their indices or UUIDs")]
    try:
        resolved = resolve(settings)
        facts = model_facts(settings, resolved, fetch=False)
        settings, _ = for_host(settings, "gpu")  # the memory check is of the GPU build
        kv = kv_plan(settings, resolved, facts)
    except (ModelResolutionError, KvSizingError) as exc:
        return [Finding("plan", False, str(exc))]
    plan = gpu_plan(settings, facts, kv, gpus)
    if len(plan.devices) < plan.parallel.gpus:
        return [Finding("GPU count", False, f"the engine's parallelism needs {plan.parallel.gpus} GPUs, "
                        f"{len(plan.devices)} selected: set GPU_DEVICES or lower --tensor-parallel-size")]
    short = {d.index: requested for d, requested in plan.short_of()}
    out = []
    for device in plan.devices:
        free = (device.free_bytes or 0) / GIB
        if device.index in short:
            out.append(Finding(f"GPU {device.label}", False, f"{free:.2f} GiB free < {short[device.index] / GIB:.2f} "
                               "GiB vLLM will request: stop what else runs there (nvidia-smi), lower KV_CACHE_GB or "
                               "GPU_HEADROOM_GB, or choose another GPU with GPU_DEVICES"))
        else:
            out.append(Finding(f"GPU {device.label}", True, f"{free:.2f} GiB free ≥ {plan.need_bytes / GIB:.2f} GiB"))
    if plan.peak is not None:  # what the defaults promise (engine.gpupeak): said, never a failure of its own
        out.append(Finding("start-up peak", True, plan.peak.line()))
    return out


def writable_by(path: Path, uid: int, gid: int) -> bool:
    """Whether ``uid``/``gid`` may create files in ``path`` (or its nearest parent) by its mode bits."""
    while not path.exists() and path.parent != path:
        path = path.parent
    if uid == 0:
        return True
    info = path.stat()
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IWUSR)
    if info.st_gid == gid:
        return bool(info.st_mode & stat.S_IWGRP)
    return bool(info.st_mode & stat.S_IWOTH)


def check_folders(folders: Sequence[Path], uid: int, gid: int) -> list[Finding]:
    """Each folder writable by the containers' ``uid``/``gid``."""
    out = []
    for folder in folders:
        if writable_by(folder, uid, gid):
            out.append(Finding(f"{folder.name}/", True, f"writable by {uid}:{gid}"))
        else:
            out.append(Finding(f"{folder.name}/", False, f"{folder} is not writable by uid {uid}:{gid}: run "
                               f"`sudo chown -R {uid}:{gid} {folder}` or set APP_UID/APP_GID to its owner"))
    return out


def check_hf(cache: Path, token: str | None, uid: int, gid: int) -> list[Finding]:
    """The HF cache writable by the containers' uid, and HF_TOKEN shaped like a token (``hf_…``)."""
    out = [
        Finding("HF cache", True, str(cache))
        if writable_by(cache, uid, gid)
        else Finding("HF cache", False, f"{cache} is not writable by uid {uid}: `sudo chown -R {uid}:{gid} {cache}`")
    ]
    if token is not None and not token.startswith("hf_"):
        out.append(Finding("HF_TOKEN", False, "HF_TOKEN does not start with hf_: paste a token from "
                           "https://huggingface.co/settings/tokens"))
    return out


def check_ports(settings: Settings, in_container: bool) -> list[Finding]:
    """The stack's ports free (in the container: vLLM's); held by this checkout's running stack, they pass."""
    ports = [("VLLM_PORT", settings.vllm_host, settings.vllm_port)]
    if not in_container:
        ports += [
            ("UI_PORT", settings.ui_host, settings.ui_port),
            ("SIDECAR_PORT", settings.sidecar_host, settings.sidecar_port),
            ("LOCUST_WEB_PORT", settings.locust_web_host, settings.locust_web_port),
        ]
    ours = not in_container and Supervisor(settings.run_dir).alive()
    out = []
    for variable, host, port in ports:
        busy = port_in_use_message(host, port, variable)
        if busy and ours:  # the stack's own services hold their ports while it runs: not a problem to fix
            out.append(Finding(f"port {port}", True, "in use by this stack (`make up` runs; `make down` frees it)"))
        else:
            out.append(Finding(f"port {port}", busy is None, busy or "free"))
    return out


def diagnose(settings: Settings, gpus: HostGpus, in_container: bool, hf_cache: Path) -> list[Finding]:
    """Every check for this host (GPU checks only where a GPU is seen)."""
    uid = settings.container_uid if settings.container_uid is not None else os.getuid()
    gid = settings.container_gid if settings.container_gid is not None else os.getgid()
    out: list[Finding] = []
    if gpus.devices:
        runtime = engine_versions(engine_python(settings)).get("cuda_runtime") if in_container else None
        out.append(check_driver(gpus, image_cuda(settings.vllm_gpu_base, runtime)))
        if not in_container:
            out.append(check_toolkit())
        out += check_memory(settings, gpus)
    else:
        out.append(Finding("GPU", True, f"none seen ({gpus.reason}): the CPU build runs (docker-compose.cpu.yml)"))
    folders = [settings.logs_dir, settings.models_dir]  # what the engine writes (reports/: the sidecar's)
    out += check_folders(folders if in_container else [settings.logs_dir, settings.reports_dir, *folders[1:]], uid, gid)
    out += check_hf(hf_cache, settings.hf_token, uid, gid)
    out += check_ports(settings, in_container)
    return out


BLOCKING = ("driver", "GPU", "plan")
"""Findings that stop the engine's start (``ENGINE_PREFLIGHT``); the rest are warnings."""


def preflight(settings: Settings, say: Callable[[str], None]) -> bool:
    """The engine-side checks before vLLM starts (``ENGINE_PREFLIGHT=1``): each failure said, as an error
    when :data:`BLOCKING` (then False: do not start), else as a warning."""
    from huggingface_hub import constants

    ok = True
    for finding in diagnose(settings, host_gpus(), True, Path(constants.HF_HUB_CACHE)):
        if finding.ok:
            continue
        blocking = finding.check.startswith(BLOCKING)
        ok = ok and not blocking
        say(f"[{'ERROR' if blocking else 'WARNING'}] preflight: {finding.check}: {finding.text}")
    return ok


def main(argv: list[str] | None = None) -> int:
    """Print every finding; exit 1 when one failed."""
    guard_stdout()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-container", action="store_true", help="the engine container's entry: no host checks")
    args = parser.parse_args(argv)
    from huggingface_hub import constants

    findings = diagnose(get_settings(), host_gpus(), args.in_container, Path(constants.HF_HUB_CACHE))
    for finding in findings:
        print(finding.line(), flush=True)
    failed = [f for f in findings if not f.ok]
    print(f"doctor: {len(failed)} problem(s)" if failed else "doctor: ready", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
