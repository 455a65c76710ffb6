"""``make gpu-check`` (scripts/gpu_check.py) where it cannot run — no GPU: a clear refusal, nothing started — and its
verdict: each step, the measured peak against the seed's 2.8 × 10⁹ B and the plan's prediction, the report's path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.gpus import DeviceMemory
from core.settings import PROJECT_ROOT, get_settings
from engine.gpupeak import BatchLimits, ModelShape, predict_peak
from engine.gpuplan import HostGpus, host_gpus
from tests.scripts import script_module

gpu_check = script_module("gpu_check")
A10 = HostGpus([DeviceMemory(0, "GPU-a10-0", "NVIDIA A10", 23_028 * 2**20, 22_000 * 2**20)], "570.172.08")


def test_refuses_without_a_gpu_and_runs_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """No GPU seen: exit 2, the reason NVML and nvidia-smi gave, what to run instead; no step is run."""
    ran: list[list[str]] = []

    def run(cmd: list[str], _env: dict[str, str]) -> tuple[int, str]:
        ran.append(cmd)
        return 0, ""

    code = gpu_check.main([], gpus=HostGpus(reason="NVML unavailable: NVML Shared Library Not Found"), run=run)
    err = capsys.readouterr().err
    assert code == 2 and ran == []
    assert "needs an NVIDIA GPU" in err and "NVML Shared Library Not Found" in err and "make test" in err


def test_the_command_refuses_on_a_host_without_a_gpu(tmp_path: Path) -> None:
    """`python scripts/gpu_check.py` (what `make gpu-check` runs) on this machine, which has no GPU: exit 2 with the
    refusal, before anything is built or started."""
    if host_gpus().devices:
        pytest.skip("this host has a GPU: make gpu-check would run for real")
    env = {**os.environ, "LOGS_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "scripts/gpu_check.py"], cwd=PROJECT_ROOT, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "make gpu-check needs an NVIDIA GPU" in done.stderr and not list(tmp_path.iterdir())
    assert "gpu-check: app-env\n\t@$(APP_PY) scripts/gpu_check.py" in (PROJECT_ROOT / "Makefile").read_text()


def _result(measured: int | None, codes: dict[str, int]) -> object:
    result = gpu_check.CheckResult(host={}, measured_bytes=measured, predicted_bytes=2_524_653_568,
                                   predicted_from="the engine's start-up line")  # fmt: skip
    result.steps = [gpu_check.Step(name, [name], code, 12.0) for name, code in codes.items()]
    return result


def test_the_verdict_says_pass_with_the_measured_and_predicted_peaks() -> None:
    """Every step ok and 2.41 GB measured: PASS, in GB and GiB against the promise, beside the prediction."""
    passed, lines = gpu_check.verdict(_result(2_410_000_000, {"GPU tests": 0, "docker compose up": 0}))
    assert passed and lines[-1] == "gpu-check: PASS"
    assert "[  OK  ] GPU tests (12 s)" in lines
    assert "[  OK  ] measured GPU peak 2.410 GB (2.244 GiB) < the promised 2.8 GB" in lines
    assert "[ INFO ] predicted 2.525 GB (the engine's start-up line); measured − predicted = -0.115 GB" in lines


@pytest.mark.parametrize(
    ("measured", "codes", "why"),
    [
        (2_950_000_000, {"docker compose up": 0}, "[FAILED] measured GPU peak 2.950 GB (2.747 GiB) ≥ the promised 2.8 GB"),
        (2_400_000_000, {"GPU tests": 1, "docker compose up": 0}, "[FAILED] GPU tests (12 s, exit 1)"),
        (None, {"docker compose up": 1}, "[FAILED] measured GPU peak: no NVML reading (the engine never started?)"),
    ],
)  # fmt: skip
def test_the_verdict_fails_naming_why(measured: int | None, codes: dict[str, int], why: str) -> None:
    """Over the promise, a failed step, or nothing measured: FAIL, and the line that says which."""
    passed, lines = gpu_check.verdict(_result(measured, codes))
    assert not passed and lines[-1] == "gpu-check: FAIL" and why in lines


def test_the_prediction_is_read_from_the_engines_start_up_line() -> None:
    """The launcher's own line (what the engine planned on that host) gives the predicted bytes; the card class
    gives ERNIE's default peak when the log has none."""
    shape = ModelShape.from_config({"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 2,
                                    "head_dim": 128, "intermediate_size": 3072, "vocab_size": 103424})  # fmt: skip
    assert shape is not None
    line = predict_peak(shape, 721_496_064, 2**30, BatchLimits(), sms=72).line()
    assert gpu_check.predicted_from_log(f"x\n[INFO] {line}\ny") == 2_525_000_000
    assert gpu_check.predicted_from_log("no such line") is None
    assert gpu_check.predicted_for_card("NVIDIA A10") == 2_524_653_568
    assert gpu_check.predicted_for_card("NVIDIA GeForce RTX 4090") is None


def test_a_whole_check_runs_every_step_and_writes_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """With the commands stubbed: doctor, the GPU tests, compose up with a fresh SIDECAR_TOKEN in the containers'
    env file, the benchmark, compose down (the token file removed); the GPUs sampled from before the start, the
    measured peak their largest rise (another tenant's 1 GB not counted); the verdict and the report's path."""
    monkeypatch.setenv("LOGS_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("RUN_DIR", str(tmp_path / "run"))
    get_settings.cache_clear()
    seen: list[tuple[str, dict[str, str]]] = []

    def run(cmd: list[str], env: dict[str, str]) -> tuple[int, str]:
        token_file = env.get("APP_ENV_FILE")
        seen.append((" ".join(cmd), {"token_in_file": str(token_file and f"SIDECAR_TOKEN={env['SIDECAR_TOKEN']}"
                                                           in Path(token_file).read_text())}))  # fmt: skip
        return 0, "[RESULT] report reports/20260101T000000Z-abc.json\n" if "run_benchmark" in cmd[0] else ""

    readings = iter([{0: 10**9}])  # the tenant's 1 GB before the start, then the engine's 2.41 GB on top
    try:
        code = gpu_check.main([], gpus=A10, run=run, read=lambda: next(readings, {0: 10**9 + 2_410_000_000}))
    finally:
        get_settings.cache_clear()
    out = capsys.readouterr().out
    cmds = [cmd for cmd, _flags in seen]
    assert cmds[0] == "make -s engine-env" and cmds[1].endswith("-m engine.doctor")
    assert "-m pytest" in cmds[2] and cmds[2].endswith("-m gpu tests/gpu")
    assert cmds[3:] == ["scripts/compose_stack.sh up", "./run_benchmark.sh", "scripts/compose_stack.sh down"]
    assert [flags["token_in_file"] for _cmd, flags in seen[3:]] == ["True", "True", "True"]
    assert not (tmp_path / "run" / "gpu-check.env").exists()
    assert code == 0 and "gpu-check: PASS" in out and "benchmark report: reports/20260101T000000Z-abc.json" in out
    [report] = (tmp_path / "logs" / "gpu-check").glob("gpu-check-*.json")
    assert f"[INFO] report: {report}" in out
    data = json.loads(report.read_text())
    assert data["passed"] and data["measured_bytes"] == 2_410_000_000 and data["predicted_bytes"] == 2_524_653_568
