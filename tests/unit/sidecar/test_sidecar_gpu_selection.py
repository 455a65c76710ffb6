"""The report describes the GPUs the engine uses (GPU_DEVICES), not every GPU NVML sees: a fake two-GPU NVML with
the engine on GPU 1 and another tenant on GPU 0; per-GPU figures, the other tenant's memory where NVML tells, and
both CUDA versions (the driver's, and the engine's runtime recorded by the launcher)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from core.enginestate import EngineState, pid_namespace, write_engine_state
from core.gpus import DeviceMemory, select_devices
from core.units import GIB
from sidecar.reports.writer import ReportService
from sidecar.sampling.gpu import NvmlReader
from sidecar.server import create_app
from tests.fakes import FakeNvml
from tests.unit.sidecar.test_sidecar_app import AUTH, BASE_URL, body, make_settings

TENANT_PID = 999_999_999  # not a process here: someone else's


def two_a10s() -> FakeNvml:
    nvml = FakeNvml(names=["NVIDIA A10", "NVIDIA L4"], total_bytes=23028 * 1024**2, used_bytes=[12 * GIB, 3 * GIB])
    nvml.processes = {0: [(TENANT_PID, 12 * GIB)], 1: [(os.getpid(), 2 * GIB), (TENANT_PID, GIB)]}
    return nvml


def test_cuda_visible_devices_semantics() -> None:
    devices = [DeviceMemory(i, f"GPU-{i}abc-{i}", None, 0) for i in range(4)]
    assert [d.index for d in select_devices("3,1", devices)] == [3, 1]
    assert [d.index for d in select_devices("GPU-2a", devices)] == [2]  # a unique UUID prefix
    assert [d.index for d in select_devices("1,7,2", devices)] == [1]  # the list ends at an unknown device
    assert select_devices("", devices) == [] and len(select_devices(None, devices)) == 4


def test_reader_reads_only_the_selected_gpu_by_its_nvml_index() -> None:
    reader = NvmlReader(two_a10s(), devices="1")
    info = reader.info()
    assert info.names == ["NVIDIA L4"] and info.indices == [1] and info.uuids[0] and info.cuda_version == "12.8"
    (sample,) = reader.read(frozenset({os.getpid()}))
    assert sample.index == 1 and sample.mem_used_gb == pytest.approx(3.0) and sample.other_mem_gb == pytest.approx(1.0)
    (unknown,) = reader.read(frozenset({12345678}))  # none of NVML's pids is the engine's: another pid namespace
    assert unknown.other_mem_gb is None
    with pytest.raises(RuntimeError, match="GPU_DEVICES='5' names none"):
        NvmlReader(two_a10s(), devices="5")


def test_report_names_the_engines_gpu_only(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, gpu_devices="1")
    state = EngineState(
        requested="m", source="local", model_arg="/m", served_name="m", pid=os.getpid(), pid_namespace=pid_namespace(),
        argv=["python", "-m", "vllm"], engine_cuda_runtime="12.9", engine_torch_version="2.9.0+cu129",
        engine_python_version="3.12.3", gpu_devices=[1],
    )
    write_engine_state(settings.engine_state_file, state)
    service = ReportService.from_settings(
        settings, gpu=(NvmlReader(two_a10s(), devices=settings.gpu_devices), None),
        server_facts=lambda url: {"version": "0.32.0", "model_id": "m"},
    )
    with TestClient(create_app(settings, service), base_url=BASE_URL, headers=AUTH) as client:
        response = client.post("/reports", json=body())
        assert response.status_code == 200, response.text
        metrics = client.get("/metrics").text
    report = json.loads(Path(response.json()["report_path"]).read_text())
    env, gpus = report["environment"], report["resources"]["gpus"]
    assert (env["gpu_model"], env["gpu_count"], env["gpu_indices"]) == ("NVIDIA L4", 1, [1])
    assert (env["cuda_version"], env["engine_cuda_runtime"], env["engine_torch_version"]) == ("12.8", "12.9", "2.9.0+cu129")
    assert env["engine_python_version"] == "3.12.3"
    assert [g["index"] for g in gpus] == [1] and gpus[0]["name"] == "NVIDIA L4" and gpus[0]["uuid"]
    assert gpus[0]["mem_used_peak_gb"] == pytest.approx(3.0) and gpus[0]["mem_total_gb"] == pytest.approx(22.488, 1e-3)
    assert gpus[0]["other_mem_peak_gb"] == pytest.approx(1.0)
    assert report["resources"]["gpu_mem_peak_gb"] == pytest.approx(3.0)  # not GPU 0's tenant's 12 GiB
    assert 'gpu="1",name="NVIDIA L4"' in metrics and 'gpu="0"' not in metrics
