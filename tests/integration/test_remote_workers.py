"""Load from several hosts: a Locust worker in another network namespace (its own host name, its own folders, no
plan or dataset file) joins `python -m loadgen.command.benchmark --expect-workers 1` over real TCP through a veth pair, proves the
sidecar token, sends its share, and its rows reach the master's rows file — exactly REQUESTS measured rows, each
naming its host — in closed and open loop. A worker with the wrong token is refused and the run ends with a clear
error. Real Locust, the bundled mock, a real sidecar.

The namespace, the veth pair and their addresses (10.243.N.1/.2, a /30 only this test uses) are made by the test
and removed at its end; nothing else on the machine is touched. Needs root and iproute2 (skipped otherwise).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from core.net import free_port
from core.settings import PROJECT_ROOT
from tests.integration.conftest import wait_http

pytestmark = pytest.mark.integration
APP_PY = str(PROJECT_ROOT / ".venvs/app/bin/python")
TOKEN = "remote-test-token"
WORKER_HOST = "ns-worker"


def ip(*args: str, ns: str | None = None) -> None:
    """``ip ARGS`` (inside namespace ``ns`` when given); raises on failure."""
    prefix = ["ip", "netns", "exec", ns] if ns else []
    subprocess.run([*prefix, "ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Netns:
    """A network namespace joined to this one by a veth pair: ``host_addr`` here, ``ns_addr`` inside."""

    name: str
    host_addr: str
    ns_addr: str

    def argv(self, *command: str) -> list[str]:
        """``command`` inside the namespace, in its own UTS namespace named :data:`WORKER_HOST` (another host)."""
        script = f"hostname {WORKER_HOST} && exec \"$@\""
        return ["ip", "netns", "exec", self.name, "unshare", "--uts", "sh", "-c", script, "sh", *command]


@pytest.fixture
def netns() -> Iterator[Netns]:
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
        pytest.skip("needs root, iproute2 and unshare for a network namespace")
    tag = secrets.token_hex(3)
    name, here, there = f"lsb{tag}", f"lsbh{tag}", f"lsbn{tag}"
    subnet = secrets.randbelow(250) + 1
    host_addr, ns_addr = f"10.243.{subnet}.1", f"10.243.{subnet}.2"
    try:
        ip("netns", "add", name)
        ip("link", "add", here, "type", "veth", "peer", "name", there)
        ip("link", "set", there, "netns", name)
        ip("addr", "add", f"{host_addr}/30", "dev", here)
        ip("link", "set", here, "up")
        ip("addr", "add", f"{ns_addr}/30", "dev", there, ns=name)
        ip("link", "set", there, "up", ns=name)
        ip("link", "set", "lo", "up", ns=name)
        yield Netns(name, host_addr, ns_addr)
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        subprocess.run(["ip", "link", "del", here], capture_output=True)  # gone with the namespace, normally


@dataclass
class Cluster:
    """A sidecar and a mock server reachable from the namespace; ``env`` runs the benchmark as the master."""

    env: dict[str, str]
    netns: Netns
    tmp: Path
    started: list[subprocess.Popen[str]] = field(default_factory=list)
    """Every benchmark and worker a test started: ended by the fixture even when the test was interrupted."""

    def worker(self, token: str = TOKEN, **knobs: str) -> subprocess.Popen[str]:
        """``python -m loadgen.command.benchmark --worker`` inside the namespace, with its own folders and the given token."""
        env = {k: v for k, v in self.env.items() if k not in ("LOGS_DIR", "RUN_DIR", "REPORTS_DIR")}
        env.update(SIDECAR_TOKEN=token, LOGS_DIR=str(self.tmp / "worker-logs"), RUN_DIR=str(self.tmp / "worker-run"),
                   MASTER_HOST=self.netns.host_addr, **knobs)  # fmt: skip
        argv = self.netns.argv(APP_PY, "-m", "loadgen.command.benchmark", "--worker")
        self.started.append(subprocess.Popen(argv, cwd=PROJECT_ROOT, env=env, text=True, stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT))  # fmt: skip
        return self.started[-1]

    def bench(self, **knobs: str) -> subprocess.Popen[str]:
        self.started.append(subprocess.Popen([APP_PY, "-m", "loadgen.command.benchmark"], cwd=PROJECT_ROOT,
                                             env={**self.env, **knobs}, text=True, stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT))  # fmt: skip
        return self.started[-1]

    def rows(self) -> list[dict[str, object]]:
        out = []
        for path in (self.tmp / "logs" / "runs").glob("*.requests.jsonl"):
            out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [r for r in out if r["phase"] == "measured"]


@pytest.fixture
def cluster(netns: Netns, tmp_path: Path) -> Iterator[Cluster]:
    sidecar_port, mock_port, master_port = free_port(), free_port(netns.host_addr), free_port(netns.host_addr)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "SIDECAR_", "MODEL"))}
    env.update(
        SIDECAR_PORT=str(sidecar_port), SIDECAR_TOKEN=TOKEN, LOGS_DIR=str(tmp_path / "logs"),
        REPORTS_DIR=str(tmp_path / "reports"), RUN_DIR=str(tmp_path / "run"),
        VLLM_BASE_URL=f"http://{netns.host_addr}:{mock_port}", WARMUP="0", MAX_TOKENS="10", PYTHONUNBUFFERED="1",
        EXPECT_WORKERS="1", WORKERS="1", MASTER_BIND_HOST=netns.host_addr, MASTER_PORT=str(master_port),
        EXPECT_WORKERS_TIMEOUT_S="60",
    )  # fmt: skip
    (tmp_path / "logs").mkdir()
    sidecar = subprocess.Popen([APP_PY, "-m", "sidecar.server"], cwd=PROJECT_ROOT, env=env,
                               stdout=(tmp_path / "sidecar.log").open("wb"), stderr=subprocess.STDOUT)  # fmt: skip
    mock = subprocess.Popen([APP_PY, "-m", "loadgen.selftest.mock_server", "--host", netns.host_addr, "--port", str(mock_port),
                             "--tokens", "10", "--ttft-ms", "50", "--itl-ms", "20"], cwd=PROJECT_ROOT,
                            stdout=(tmp_path / "mock.log").open("wb"), stderr=subprocess.STDOUT)  # fmt: skip
    cluster = Cluster(env, netns, tmp_path)
    try:
        wait_http(f"http://127.0.0.1:{sidecar_port}/health", 120)
        wait_http(f"http://{netns.host_addr}:{mock_port}/health", 60)
        yield cluster
    finally:
        started: list[subprocess.Popen[Any]] = [*cluster.started, mock, sidecar]
        for proc in started:  # SIGTERM: a benchmark or worker ends its Locust processes
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()


def finish(proc: subprocess.Popen[str], timeout_s: float = 240) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"did not end within {timeout_s:.0f} s:\n{out[-4000:]}")
    return out


@pytest.mark.parametrize("loop", ["closed", "open"])
def test_a_worker_in_another_namespace_sends_its_share(cluster: Cluster, loop: str) -> None:
    knobs = {"REQUESTS": "40", "CONCURRENCY": "4"} | ({"RATE": "10"} if loop == "open" else {})
    bench = cluster.bench(**knobs)
    time.sleep(1.0)
    worker = cluster.worker()
    out = finish(bench)
    worker_out = finish(worker, 60)
    assert bench.returncode == 0, out[-4000:] + "\n--- worker\n" + worker_out[-2000:]
    assert "Waiting up to 60 s for 1 remote load worker(s)" in out
    rows = cluster.rows()
    assert len(rows) == 40, (len(rows), out[-3000:])
    assert len({r["request_id"] for r in rows}) == 40
    hosts = {r["host"] for r in rows}
    assert hosts == {socket.gethostname(), WORKER_HOST}, hosts
    assert all(r["ok"] for r in rows), [r.get("error") for r in rows if not r["ok"]][:3]
    assert all(str(r["process"]).startswith("worker") for r in rows)
    # the rows' times are in the master's clock: all inside the run, not hours off
    starts = [float(str(r["started_at"])) for r in rows]
    assert max(starts) - min(starts) < 120
    report = json.loads(next((cluster.tmp / "reports").glob("benchmark_report_*.json")).read_text())
    assert report["config"]["remote_workers"] == 1
    assert {p.get("host") for p in report["client"]["processes"]} == {socket.gethostname(), WORKER_HOST}


def test_a_worker_without_the_token_is_refused(cluster: Cluster) -> None:
    bench = cluster.bench(REQUESTS="10", EXPECT_WORKERS_TIMEOUT_S="8")  # the worker tries within 2-3 s of its start
    time.sleep(1.0)
    worker = cluster.worker(token="not-the-token")
    out = finish(bench, 120)
    finish(worker, 60)
    assert bench.returncode == 2, out[-3000:]
    assert "load worker(s) were expected within 8 s" in out
    assert "./run_benchmark.sh --worker --master-host" in out
    assert cluster.rows() == []


def test_one_worker_serves_every_point_of_a_sweep(cluster: Cluster) -> None:
    """`SWEEP=concurrency:2,4` with a remote worker started once with `WORKER_RUNS=2`: each point's master gets the
    worker (a fresh Locust worker per run), each point has exactly its REQUESTS rows with both hosts, and the worker
    exits 0 after the second run."""
    bench = cluster.bench(SWEEP="concurrency:2,4", REQUESTS="12", COOLDOWN_S="0")
    time.sleep(1.0)
    worker = cluster.worker(WORKER_RUNS="2")
    out = finish(bench, 400)
    worker_out = finish(worker, 120)
    assert bench.returncode == 0, out[-4000:] + "\n--- worker\n" + worker_out[-2000:]
    assert worker.returncode == 0 and "Run 1 done; waiting for the next run's master" in worker_out, worker_out[-2000:]
    runs = sorted((cluster.tmp / "logs" / "runs").glob("*.requests.jsonl"))
    per_run = [[json.loads(x) for x in p.read_text().splitlines() if x.strip()] for p in runs]
    measured = [[r for r in rows if r["phase"] == "measured"] for rows in per_run]
    assert [len(rows) for rows in measured] == [12, 12], [len(rows) for rows in measured]
    for rows in measured:
        assert {r["host"] for r in rows} == {socket.gethostname(), WORKER_HOST}
        assert all(r["ok"] for r in rows)
