"""A sidecar per GPU host, merged by the coordinator: two real sidecar processes (``python -m sidecar.server``; the
peer reads a fake two-GPU NVML), the coordinator with PEER_SIDECARS naming the peer, a port where no sidecar runs and
an entry that is no URL. A sampling window and a report of the coordinator list GPU memory per host and per GPU; the
peers that gave nothing are in the report's gaps with why, and the report is written all the same."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from core.net import free_port
from core.settings import PROJECT_ROOT
from tests.integration.conftest import wait_http
from tests.unit.sidecar.test_sidecar_app import body

pytestmark = pytest.mark.integration
APP_PY = str(PROJECT_ROOT / ".venvs/app/bin/python")
TOKEN = "peer-test-token"
GIB_USED = (10.0, 20.0)


def start(tmp: Path, name: str, module: str, port: int, **env: str) -> subprocess.Popen[bytes]:
    """A sidecar process on ``port`` with its own folders and the shared token."""
    folder = tmp / name
    (folder / "logs").mkdir(parents=True)
    full = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "SIDECAR_", "MODEL", "PEER_", "GPU_"))}
    full.update(SIDECAR_PORT=str(port), SIDECAR_TOKEN=TOKEN, LOGS_DIR=str(folder / "logs"),
                REPORTS_DIR=str(folder / "reports"), RUN_DIR=str(folder / "run"), PYTHONUNBUFFERED="1",
                VLLM_BASE_URL=f"http://127.0.0.1:{free_port()}", GPU_SAMPLE_INTERVAL_S="0.2", **env)  # fmt: skip
    return subprocess.Popen([APP_PY, "-m", module], cwd=PROJECT_ROOT, env=full,
                            stdout=(folder / "sidecar.log").open("wb"), stderr=subprocess.STDOUT)  # fmt: skip


@pytest.fixture
def sidecars(tmp_path: Path) -> Iterator[tuple[int, int, int]]:
    """``(coordinator port, peer port, dead port)``: both sidecars healthy; stopped at the end."""
    coordinator, peer, dead = free_port(), free_port(), free_port()
    procs = [
        start(tmp_path, "peer", "tests.integration.fake_gpu_sidecar", peer, LOAD_HOST_NAME="gpu2",
              FAKE_GPU_USED_GIB=",".join(map(str, GIB_USED))),
        start(tmp_path, "coordinator", "sidecar.server", coordinator, LOAD_HOST_NAME="gpu1",
              PEER_SIDECARS=f"http://127.0.0.1:{peer},http://127.0.0.1:{dead},gpu4:8200"),
    ]  # fmt: skip
    try:
        for port in (coordinator, peer):
            wait_http(f"http://127.0.0.1:{port}/health", 120)
        yield coordinator, peer, dead
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)


def test_coordinator_merges_the_peers_gpu_memory_and_names_the_missing_ones(
    sidecars: tuple[int, int, int], tmp_path: Path
) -> None:
    """Window and report: this host (no NVML here, with why), the peer's two GPUs with their memory, the dead port
    (connection refused) and the bad entry as gaps; the peer's endpoint refuses a request without the token."""
    coordinator, peer, dead = sidecars
    auth = {"Authorization": f"Bearer {TOKEN}"}
    now = time.time()
    assert (
        httpx.get(f"http://127.0.0.1:{peer}/resources/window", params={"start": now - 1, "end": now}).status_code == 401
    )
    with httpx.Client(base_url=f"http://127.0.0.1:{coordinator}", headers=auth, timeout=60) as client:
        window = client.post("/windows/start").json()["window_id"]
        time.sleep(1.0)
        hosts = client.post(f"/windows/{window}/stop").json()["resources"]["hosts"]
        answer = client.post("/reports", json=body(runs_dir=tmp_path / "coordinator" / "logs" / "runs"))
    assert [h["host"] for h in hosts] == ["gpu1", "gpu2", "127.0.0.1", "gpu4:8200"]
    own, remote, down, bad = hosts
    assert own["url"] is None and own["gpus"] == [] and own["gpu_unavailable_reason"]
    assert remote["url"] == f"http://127.0.0.1:{peer}" and remote["unavailable_reason"] is None
    assert [(g["index"], g["name"], round(g["mem_used_peak_gb"], 1)) for g in remote["gpus"]] == [
        (0, "NVIDIA H200", GIB_USED[0]), (1, "NVIDIA H200", GIB_USED[1])]  # fmt: skip
    assert round(remote["gpu_mem_peak_gb"], 1) == sum(GIB_USED) and remote["gpu_samples"] > 0
    assert down["url"] == f"http://127.0.0.1:{dead}" and "ConnectError" in down["unavailable_reason"]
    assert "not an http(s)" in bad["unavailable_reason"]

    assert answer.status_code == 200, answer.text
    report = answer.json()["report"]
    assert [h["host"] for h in report["resources"]["hosts"]] == ["gpu1", "gpu2", "127.0.0.1", "gpu4:8200"]
    assert len(report["resources"]["hosts"][1]["gpus"]) == 2
    gaps = [g for g in report["gaps"] if g.startswith("GPU memory of host")]
    assert len(gaps) == 2 and f"127.0.0.1:{dead}" in gaps[0] and "ConnectError" in gaps[0] and "gpu4" in gaps[1]
    page = Path(answer.json()["report_path"]).with_suffix(".md").read_text()
    assert "Host gpu2 GPU 1 NVIDIA H200" in page and "not reported" in page
