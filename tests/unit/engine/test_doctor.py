"""``make doctor`` names the fix for each reason the GPU stack would not start, from the host's real tools' answers
(here a fake ``nvidia-smi`` on PATH printing what the real one prints for its CSV query, and a fake NVML)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.settings import PROJECT_ROOT, Settings
from engine import doctor
from engine.gpuplan import SMI_QUERY, HostGpus, from_nvidia_smi, host_gpus
from tests.fakes import FakeNvml
from tests.unit.engine.test_gpu_plan import ERNIE_FULL

MIB = 1024**2


def fake_smi(tmp_path: Path, rows: list[str]) -> Path:
    """A ``nvidia-smi`` that answers the launcher's query (``SMI_QUERY``) with ``rows``, and fails on anything else."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nvidia-smi"
    expected = " ".join(SMI_QUERY)
    body = "\n".join(rows)
    script.write_text(f'#!/bin/sh\n[ "$*" = "{expected}" ] || exit 9\ncat <<"EOF"\n{body}\nEOF\n')
    script.chmod(0o755)
    return bin_dir


def a10(index: int, used_mib: int, driver: str = "535.183.01") -> str:
    total = 23028
    return f"{index}, GPU-{index:08d}-aaaa, NVIDIA A10, {total}, {total - used_mib}, {driver}"


def _settings(tmp_path: Path, **env: object) -> Settings:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(ERNIE_FULL))
    return Settings(_env_file=None, model=str(model), logs_dir=tmp_path / "logs", **env)  # type: ignore[call-arg,arg-type]


def _gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: list[str]) -> HostGpus:
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path, rows)}{os.pathsep}{os.environ['PATH']}")
    return host_gpus(nvml=FakeNvml(fail_init=RuntimeError("NVML Shared Library Not Found")))


def test_nvidia_smi_rows_become_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = _gpus(tmp_path, monkeypatch, [a10(0, 12_000), a10(1, 0)])
    assert gpus.source == "nvidia-smi" and gpus.driver_version == "535.183.01"
    assert [d.index for d in gpus.devices] == [0, 1] and gpus.devices[1].free_bytes == 23028 * MIB


def test_driver_below_the_image_minimum_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA 13 image on a 535 driver: refused, naming 580.65.06 and the -cu129 image, which runs there; on a 545
    driver the -cu129 image is no way out (the toolkit refuses it too), so only the upgrade is named."""
    gpus = _gpus(tmp_path, monkeypatch, [a10(0, 0, driver="535.183.01")])
    failed = doctor.check_driver(gpus, "cu130")
    assert not failed.ok and "535.183.01 cannot run the cu130" in failed.text and "≥ 580.65.06" in failed.text
    assert "VLLM_GPU_BASE=vllm/vllm-openai:v0.32.0-cu129" in failed.text
    assert doctor.check_driver(gpus, "cu129").ok  # the default image runs on a 535 driver
    old = doctor.check_driver(HostGpus(gpus.devices, "545.23.08"), "cu130")
    assert not old.ok and "VLLM_GPU_BASE" not in old.text and "install a driver ≥ 580.65.06" in old.text


CU129_LABEL = "cuda>=12.9 " + " ".join(
    f"brand={brand},driver>={branch},driver<{branch + 1}"
    for branch in (535, 550, 560, 565, 570)
    for brand in ("unknown", "grid", "tesla", "nvidia", "quadro", "quadrortx", "nvidiartx", "vapps", "vpc", "vcs",
                  "vws", "cloudgaming")
)
"""NVIDIA_REQUIRE_CUDA of vLLM's -cu129 images (``collect_env`` in the image: the nvidia/cuda 12.9.1 base's label)."""
DRIVER_CUDA = {520: "11.8", 525: "12.0", 530: "12.1", 535: "12.2", 545: "12.3", 550: "12.4", 555: "12.5", 560: "12.6",
               565: "12.7", 570: "12.8", 575: "12.9", 580: "13.0", 590: "13.1"}  # fmt: skip
"""The CUDA version each driver branch reports (nvidia-smi's "CUDA Version"; CUDA toolkit release notes)."""


def toolkit_starts(label: str, driver: str, brand: str = "nvidia") -> bool:
    """libnvidia-container's check of ``label`` (src/cli/dsl.c, src/cli/configure.c): any space-separated alternative
    whose comma-separated conditions all hold, versions compared number by number."""

    def number(text: str) -> tuple[int, ...]:
        return tuple(int(part) for part in text.split("."))

    facts = {"cuda": DRIVER_CUDA[number(driver)[0]], "driver": driver}
    tests = {">=": lambda a, b: a >= b, "<": lambda a, b: a < b}
    for alternative in label.split():
        held = True
        for condition in alternative.split(","):
            key, op, value = re.fullmatch(r"(\w+)(>=|<|=)(.+)", condition).groups()  # type: ignore[union-attr]
            held &= value == brand if key == "brand" else tests[op](number(facts[key]), number(value))
        if held:
            return True
    return False


@pytest.mark.parametrize(
    "driver",
    ["520.61.05", "525.147.05", "530.41.03", "535.183.01", "545.23.08", "550.127.05", "555.42.06", "560.35.03",
     "565.57.01", "570.86.15", "575.51.03", "580.65.06", "580.95.05", "590.44.01"],
)  # fmt: skip
def test_the_default_image_passes_exactly_the_drivers_the_toolkit_starts_it_on(driver: str) -> None:
    """The -cu129 image: doctor passes a driver exactly when the Container Toolkit's evaluation of the image's label
    starts it (CUDA ≥ 12.9, or the 535, 550, 560, 565 or 570 branch): 525, 545 and 555 are refused although CUDA 12's
    minor-version compatibility would run there, and the refusal names the drivers that pass."""
    found = doctor.check_driver(HostGpus([], driver), "cu129")
    assert found.ok is toolkit_starts(CU129_LABEL, driver), (driver, found.text)
    branch = int(driver.split(".")[0])
    assert found.ok is (branch in (535, 550, 560, 565, 570) or branch >= 575), driver
    if not found.ok:
        assert "≥ 575.51.03 (CUDA 12.9) or the 535, 550, 560, 565 or 570 branch" in found.text, found.text


def test_no_container_toolkit_names_the_fix() -> None:
    missing = doctor.check_toolkit(which=lambda _tool: None)
    assert not missing.ok and "nvidia-ctk runtime configure" in missing.text
    assert doctor.check_toolkit(which=lambda tool: f"/usr/bin/{tool}" if tool == "nvidia-ctk" else None).ok


def test_too_little_free_memory_names_the_gpu_and_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU 0 nearly full (another tenant), GPU 1 free: the engine on GPU 0 fails, GPU_DEVICES=1 passes."""
    gpus = _gpus(tmp_path, monkeypatch, [a10(0, 21_500), a10(1, 0)])
    full = doctor.check_memory(_settings(tmp_path, gpu_devices="0"), gpus)
    assert [(f.check, f.ok) for f in full] == [("GPU 0 (NVIDIA A10)", False), ("start-up peak", True)]
    assert full[0].check == "GPU 0 (NVIDIA A10)" and "GPU_DEVICES" in full[0].text and "KV_CACHE_GB" in full[0].text
    assert all(f.ok for f in doctor.check_memory(_settings(tmp_path, gpu_devices="GPU-00000001"), gpus))
    tp2 = doctor.check_memory(_settings(tmp_path, gpu_devices="1", vllm_extra_args="-tp 2"), gpus)
    assert not tp2[0].ok and "needs 2 GPUs" in tp2[0].text


def test_unwritable_checkout_names_the_chown(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o755)
    other_uid = os.stat(logs).st_uid + 4242
    [finding] = doctor.check_folders([logs], other_uid, other_uid)
    assert not finding.ok and f"sudo chown -R {other_uid}:{other_uid} {logs}" in finding.text
    assert doctor.check_folders([logs], os.stat(logs).st_uid, os.stat(logs).st_gid)[0].ok
    logs.chmod(0o777)
    assert doctor.check_folders([logs / "not-yet"], other_uid, other_uid)[0].ok  # the nearest folder decides


def test_image_cuda_from_the_tag_or_the_runtime() -> None:
    assert doctor.image_cuda("vllm/vllm-openai:v0.32.0-cu129") == "cu129"
    assert doctor.image_cuda("vllm/vllm-openai:v0.32.0-cu129@sha256:ab") == "cu129"
    assert doctor.image_cuda("vllm/vllm-openai:v0.32.0") == "cu130"
    assert doctor.image_cuda("vllm/vllm-openai:v0.32.0", runtime="12.9") == "cu129"


def test_hf_token_shape() -> None:
    assert not doctor.check_hf(Path("/tmp"), "abc", 0, 0)[-1].ok
    assert all(f.ok for f in doctor.check_hf(Path("/tmp"), "hf_abc", 0, 0))


def test_make_doctor_prints_one_line_per_failure(tmp_path: Path) -> None:
    """The command as `make doctor` runs it: a too-old driver for the cu130 image, no toolkit on PATH, a full GPU, an
    unwritable logs/ — exit 1, each a [FAIL] line with its fix."""
    bin_dir = fake_smi(tmp_path, [a10(0, 22_500, driver="535.183.01")])
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o555)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(ERNIE_FULL))
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "MODEL": str(model),
        "LOGS_DIR": str(logs),
        "VLLM_GPU_BASE": "vllm/vllm-openai:v0.32.0",  # vLLM's CUDA 13 build
        "APP_UID": str(os.stat(logs).st_uid + 4242),
        "VLLM_PORT": "1",  # below 1024 is refused to non-root; root binds it: either way one line
        "PYTHONPATH": str(PROJECT_ROOT),
    }
    done = subprocess.run([sys.executable, "-m", "engine.doctor", "--in-container"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=PROJECT_ROOT)
    assert done.returncode == 1, done.stdout + done.stderr
    fails = [line for line in done.stdout.splitlines() if line.startswith("[FAIL]")]
    assert any(line.startswith("[FAIL] driver:") for line in fails), done.stdout
    assert any(line.startswith("[FAIL] GPU 0 (NVIDIA A10):") for line in fails), done.stdout
    assert any(line.startswith("[FAIL] logs/:") and "chown" in line for line in fails), done.stdout
    assert done.stdout.rstrip().endswith("problem(s)")


def test_from_nvidia_smi_reports_the_tools_failure() -> None:
    failed = subprocess.CompletedProcess([], 9, "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")
    assert "couldn't communicate" in (from_nvidia_smi(run=lambda _cmd: failed).reason or "")


def test_engine_preflight_blocks_on_gpu_failures_and_warns_on_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENGINE_PREFLIGHT (the compose engine): a full GPU stops the start with its fix; an unwritable logs/ only warns
    (the launcher then logs to stdout)."""
    gpus = _gpus(tmp_path, monkeypatch, [a10(0, 22_500)])
    monkeypatch.setattr(doctor, "host_gpus", lambda: gpus)
    lines: list[str] = []
    assert doctor.preflight(_settings(tmp_path, container_uid=os.getuid() + 4242), lines.append) is False
    assert any(line.startswith("[ERROR] preflight: GPU 0 (NVIDIA A10):") for line in lines), lines
    roomy = _gpus(tmp_path, monkeypatch, [a10(0, 0)])
    monkeypatch.setattr(doctor, "host_gpus", lambda: roomy)
    (tmp_path / "logs").mkdir(mode=0o555, exist_ok=True)
    lines.clear()
    assert doctor.preflight(_settings(tmp_path, container_uid=os.stat(tmp_path).st_uid + 4242), lines.append) is True
    assert any(line.startswith("[WARNING] preflight: logs/:") for line in lines), lines


def test_launcher_logs_to_stdout_when_logs_cannot_be_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.logpipe import output

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    settings = Settings(_env_file=None, logs_dir=blocker / "logs", vllm_log_to_file=True)  # type: ignore[call-arg]
    out, writer = output(settings)
    assert writer is None and "logging to stdout only" in capsys.readouterr().err
    out.line("still printed")


def test_doctor_prints_the_predicted_start_up_peak(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make doctor` on a GPU host says the engine's predicted start-up peak in GB with its terms, under the seed's
    2.8 GB for ERNIE-4.5-0.3B at the defaults, and above it with vLLM's own batch defaults (never a failure)."""
    gpus = _gpus(tmp_path, monkeypatch, [a10(0, 0)])
    [*_, peak] = doctor.check_memory(_settings(tmp_path), gpus)
    assert peak.check == "start-up peak" and peak.ok
    assert "2.525 GB" in peak.text and "KV pool 1.074" in peak.text and "under the seed's 2.8 GB" in peak.text
    [*_, big] = doctor.check_memory(_settings(tmp_path, vllm_extra_args="--max-num-seqs 1024 "
                                              "--max-num-batched-tokens 8192"), gpus)  # fmt: skip
    assert big.ok and "ABOVE the seed's 2.8 GB" in big.text and "1024 sequences" in big.text


def test_ports_held_by_this_running_stack_pass_and_others_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make doctor` while `make up` runs: the stack's own busy ports pass ("in use by this stack"); with no live
    supervisord of this checkout (none, or a stale pid file) a busy port is a problem to fix."""
    monkeypatch.setattr(doctor, "port_in_use_message", lambda host, port, var: f"Port {port} is already in use")
    settings = Settings(_env_file=None, run_dir=tmp_path)  # type: ignore[call-arg]
    assert not any(f.ok for f in doctor.check_ports(settings, in_container=False))
    (tmp_path / "supervisord.pid").write_text(str(os.getpid()))
    found = doctor.check_ports(settings, in_container=False)
    assert len(found) == 4 and all(f.ok and "in use by this stack" in f.text for f in found)
    (tmp_path / "supervisord.pid").write_text("999999999")
    assert not any(f.ok for f in doctor.check_ports(settings, in_container=False))
