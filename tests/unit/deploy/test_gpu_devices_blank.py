"""A blank GPU_DEVICES means every GPU to each of its readers: compose's ``GPU_DEVICES: ${GPU_DEVICES:-}`` with the
variable unset (a fresh clone), and a compose replica's ``GPU_DEVICES: ""`` (its container sees only its own GPUs),
reach the engine launcher's environment for vLLM, the preflight's GPU checks and the sidecar's GPU reader as "all"
(a fake NVML and ``nvidia-smi`` answering for two A10s)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from core.settings import Settings
from engine import doctor
from engine.launcher import vllm_env
from sidecar.reports.writer import ReportService
from stack.compose_replicas import plan, replica_environment
from tests.fakes import FakeNvml
from tests.unit.deploy.containers_support import service_env, settings_from
from tests.unit.engine.test_doctor import _gpus, a10
from tests.unit.engine.test_gpu_plan import ERNIE_FULL


def engine_settings(env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The engine container's settings from ``env`` (its compose environment), with a local ERNIE config as MODEL
    and the folders in ``tmp_path``."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(ERNIE_FULL))
    folders = {"LOGS_DIR": str(tmp_path / "logs"), "REPORTS_DIR": str(tmp_path / "reports"),
               "RUN_DIR": str(tmp_path / "run"), "MODELS_DIR": str(tmp_path / "models")}  # fmt: skip
    return settings_from({**env, "MODEL": str(model), **folders}, monkeypatch)


def compose_engine_env(**host: str) -> dict[str, str]:
    """The vllm service's environment as compose renders it with no GPU_DEVICES set (``GPU_DEVICES=""``), and
    ``host`` variables."""
    env = service_env("vllm", host)
    assert env["GPU_DEVICES"] == ""
    return env


def test_a_fresh_clones_compose_engine_uses_every_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compose engine with GPU_DEVICES blank: vLLM's environment hides no GPU (no CUDA_VISIBLE_DEVICES, even
    when the container's own environment has a blank one), numbered in PCI order; the preflight checks both A10s and
    refuses nothing (ENGINE_TENSOR_PARALLEL_SIZE=2: vLLM's two ranks on the two GPUs)."""
    compose = compose_engine_env(ENGINE_TENSOR_PARALLEL_SIZE="2")
    settings = engine_settings(compose, tmp_path, monkeypatch)
    assert settings.gpu_devices is None
    env = vllm_env(settings, "gpu", base={**compose, "CUDA_VISIBLE_DEVICES": ""})
    assert "CUDA_VISIBLE_DEVICES" not in env and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    findings = doctor.check_memory(settings, _gpus(tmp_path, monkeypatch, [a10(0, 0), a10(1, 0)]))
    gpu_findings = [(f.check, f.ok) for f in findings if f.check.startswith("GPU ")]
    assert gpu_findings == [("GPU 0 (NVIDIA A10)", True), ("GPU 1 (NVIDIA A10)", True)]


def test_the_compose_sidecar_reads_every_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sidecar's GPU reader, wired as the server wires it (NVML through ``pynvml``), with compose's blank
    GPU_DEVICES: both GPUs in the reports."""
    env = service_env("sidecar", {})
    assert env["GPU_DEVICES"] == ""
    settings = engine_settings(env, tmp_path, monkeypatch)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(names=["NVIDIA A10", "NVIDIA A10"], used_bytes=[0, 0]))
    service = ReportService.from_settings(settings, server_facts=lambda _url: {})
    assert service.sampler.gpu_names == {0: "NVIDIA A10", 1: "NVIDIA A10"}


def test_each_compose_replica_uses_all_of_its_own_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """REPLICAS=2 of tensor parallel size 2 on four GPUs: each replica's container is given two (device_ids) and
    GPU_DEVICES="" over the engine's environment; inside, its launcher hides none of them from vLLM and its preflight
    checks both."""
    monkeypatch.setenv("ENGINE_TENSOR_PARALLEL_SIZE", "2")  # read by compose and by the replica plan
    base = compose_engine_env(ENGINE_TENSOR_PARALLEL_SIZE="2")
    engines = plan(engine_settings({**base, "REPLICAS": "2"}, tmp_path, monkeypatch), gpu=True, gpu_count=4)
    assert [r.gpus for r in engines] == [("0", "1"), ("2", "3")]
    for replica in engines:
        env = {**base, **replica_environment(replica)}
        assert env["GPU_DEVICES"] == ""
        settings = engine_settings(env, tmp_path, monkeypatch)
        assert settings.gpu_devices is None and "CUDA_VISIBLE_DEVICES" not in vllm_env(settings, "gpu", base=env)
        seen = _gpus(tmp_path, monkeypatch, [a10(0, 0), a10(1, 0)])  # the container sees its two, numbered 0 and 1
        assert [f.ok for f in doctor.check_memory(settings, seen) if f.check.startswith("GPU ")] == [True, True]
