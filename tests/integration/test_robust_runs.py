"""Runs that meet trouble, end to end with real processes: `python -m loadgen.command.benchmark` (and ./run_benchmark.sh) with
real Locust against the mock server and a real sidecar — the server killed mid-run, SIGTERM and SIGKILL of the
benchmark, a second benchmark on the same stack. No vLLM needed: the sidecar and the mock start per test on free
ports (:func:`core.net.free_port`) with their own folders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from core.net import free_port
from core.settings import PROJECT_ROOT
from tests.integration.conftest import report_path, wait_http

pytestmark = pytest.mark.integration
APP_PY = str(PROJECT_ROOT / ".venvs/app/bin/python")
TOKEN = "robust-test-token"


@dataclass
class Bench:
    """A sidecar (its own folders) and a mock server; ``env`` runs the benchmark against them."""

    env: dict[str, str]
    mock: subprocess.Popen[bytes]
    tmp: Path

    def start(self, *flags: str, script: bool = False, **knobs: str) -> subprocess.Popen[str]:
        """Start the benchmark (``./run_benchmark.sh`` when ``script``) in the background, output to pipes."""
        argv = [str(PROJECT_ROOT / "run_benchmark.sh")] if script else [APP_PY, "-m", "loadgen.command.benchmark"]
        return subprocess.Popen([*argv, *flags], cwd=PROJECT_ROOT, env={**self.env, **knobs}, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip

    def rows(self) -> int:
        """Measured rows written so far by the benchmark's runs."""
        return sum(p.read_text().count('"phase":"measured"') for p in (self.tmp / "logs/runs").glob("*.requests.jsonl"))

    def wait_rows(self, proc: subprocess.Popen[str], n: int, timeout_s: float = 180) -> None:
        """Wait until ``n`` measured rows are written (the load is running)."""
        deadline = time.monotonic() + timeout_s
        while self.rows() < n:
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"benchmark ended early ({proc.returncode}):\n{out[-3000:]}\n{err[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"no {n} rows within {timeout_s:.0f} s")
            time.sleep(0.5)



def start_mock(port: int, log: Path, *flags: str) -> subprocess.Popen[bytes]:
    """The mock server: 20 tokens, TTFT 100 ms, 50 ms apart (about 1 s per request); ``flags`` added."""
    with log.open("ab") as fh:
        proc = subprocess.Popen([APP_PY, "-m", "loadgen.selftest.mock_server", "--port", str(port), "--tokens", "20",
                                 "--ttft-ms", "100", "--itl-ms", "50", *flags], cwd=PROJECT_ROOT, stdout=fh,
                                stderr=subprocess.STDOUT)  # fmt: skip
    wait_http(f"http://127.0.0.1:{port}/health", 60)
    return proc


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    """A sidecar and a mock server on free ports, stopped at the end (with any benchmark process left)."""
    sidecar_port, mock_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "SIDECAR_", "MODEL"))}
    env.update(
        SIDECAR_PORT=str(sidecar_port), SIDECAR_TOKEN=TOKEN, LOGS_DIR=str(tmp_path / "logs"),
        REPORTS_DIR=str(tmp_path / "reports"), RUN_DIR=str(tmp_path / "run"),
        VLLM_BASE_URL=f"http://127.0.0.1:{mock_port}", WARMUP="0", MAX_TOKENS="20", PYTHONUNBUFFERED="1",
        TEST_PORT_OFFSET=os.environ.get("TEST_PORT_OFFSET", "24"),
    )  # fmt: skip
    (tmp_path / "logs").mkdir()
    sidecar = subprocess.Popen([APP_PY, "-m", "sidecar.server"], cwd=PROJECT_ROOT, env=env,
                               stdout=(tmp_path / "sidecar.log").open("wb"), stderr=subprocess.STDOUT)  # fmt: skip
    mock = start_mock(mock_port, tmp_path / "mock.log")
    bench = Bench(env, mock, tmp_path)
    try:
        wait_http(f"http://127.0.0.1:{sidecar_port}/health", 120)
        yield bench
    finally:
        for proc in (mock, sidecar, bench.mock):  # a test may have restarted the mock
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=20)


def locust_pids(root: int) -> set[int]:
    """The Locust processes below process ``root``."""
    try:
        children = psutil.Process(root).children(recursive=True)
    except psutil.NoSuchProcess:
        return set()
    return {p.pid for p in children if "locust" in " ".join(p.cmdline())}


def alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (zombies are gone)."""
    out = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.add(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_gone(pids: set[int], timeout_s: float = 30) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.3)
    return alive(pids)


def report_of(stdout: str) -> dict[str, Any]:
    return json.loads(report_path(stdout).read_text(encoding="utf-8"))


def test_server_killed_mid_run_ends_it_early_with_the_report(bench: Bench) -> None:
    """The mock is SIGKILLed mid-run: the breaker ends the run within seconds (not at DURATION), the users back off
    instead of flooding, the report counts the failures and says server_down, exit 6, no Locust process is left."""
    proc = bench.start(CONCURRENCY="2", DURATION="60s", SERVER_DOWN_S="3", WORKERS="2")
    bench.wait_rows(proc, 4)
    pids = locust_pids(proc.pid)
    assert pids, "Locust is running"
    killed_at = time.monotonic()
    bench.mock.send_signal(signal.SIGKILL)
    bench.mock.wait()
    out, err = proc.communicate(timeout=240)
    ended_s = time.monotonic() - killed_at
    assert proc.returncode == 6, out[-3000:] + err[-3000:]
    assert ended_s < 45, f"the run went on for {ended_s:.0f} s after the server died"
    assert "[ERROR] vLLM stopped answering at " in err and "connection refused for 3 s; the run was ended early, " \
        "report written with the failures counted" in err  # fmt: skip
    report = report_of(out)
    assert report["server_down"] and "connection refused" in report["server_down"]
    refused = report["errors"]["by_kind"].get("connection", 0)
    assert 1 <= refused <= 80, f"{refused} connection failures: the users spun instead of backing off"
    assert report["metrics"]["requests_ok"] >= 4
    assert not wait_gone(pids), "a Locust process outlived the run"
    (rows,) = (bench.tmp / "logs/runs").glob("*.requests.jsonl")
    port = int(bench.env["VLLM_BASE_URL"].rsplit(":", 1)[1])
    bench.mock = start_mock(port, bench.tmp / "mock.log")  # back up (the rebuild checks the server first)
    rebuild = bench.start("--report-from", str(rows))  # the report rebuilt from the rows says so too
    out2, err2 = rebuild.communicate(timeout=240)
    assert rebuild.returncode == 6, out2[-3000:] + err2[-3000:]
    assert report_of(out2)["server_down"] == report["server_down"]


def test_a_switch_to_another_model_mid_run_ends_the_run_saying_so(bench: Bench) -> None:
    """The server behind the benchmark comes back serving another model (what ``./start_vllm.sh`` with another
    VLLM_MODEL_PATH does to a running benchmark): every request now gets vLLM's 404 "model does not exist", so the run
    ends within seconds with exit 6 and a line naming the switch, the users backing off instead of flooding 404s
    (before: thousands of 404 rows and exit 0)."""
    proc = bench.start(CONCURRENCY="2", DURATION="60s", SERVER_DOWN_S="3")
    bench.wait_rows(proc, 4)
    bench.mock.terminate()
    bench.mock.wait()
    port = int(bench.env["VLLM_BASE_URL"].rsplit(":", 1)[1])
    bench.mock = start_mock(port, bench.tmp / "mock.log", "--models", "another-model")
    switched_at = time.monotonic()
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 6, out[-3000:] + err[-3000:]
    assert time.monotonic() - switched_at < 45
    assert "[ERROR] vLLM stopped serving the run's model at " in err and "switched to another model" in err, err[-3000:]
    report = report_of(out)
    gone = report["errors"]["by_kind"].get("http_status", 0)
    assert 1 <= gone <= 80, f"{gone} 404 answers: the users spun instead of backing off"
    assert report["metrics"]["requests_ok"] >= 4


def test_sigterm_writes_the_report_and_stops_locust_and_a_second_run_is_refused(bench: Bench) -> None:
    """./run_benchmark.sh gets SIGTERM mid-run: Ctrl-C's path (report of the rows so far marked interrupted, exit
    130, no Locust left). While it ran, a second benchmark on the same stack was refused at once with exit 2 naming
    the first one's pid."""
    first = bench.start("--concurrency", "2", "--duration", "60", script=True)
    bench.wait_rows(first, 3)
    pids = locust_pids(first.pid)
    assert pids, "Locust is running"
    started = time.monotonic()
    second = bench.start(CONCURRENCY="1", REQUESTS="2")
    out2, err2 = second.communicate(timeout=120)
    assert second.returncode == 2, out2[-2000:] + err2[-2000:]
    assert f"another benchmark is running against this stack (pid {first.pid}" in err2
    assert time.monotonic() - started < 60 and not list((bench.tmp / "logs/runs").glob("*.requests.jsonl"))[1:]
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 130, out[-3000:] + err[-3000:]
    report = report_of(out)
    assert report["interrupted"] is True and report["metrics"]["requests_total"] >= 3
    assert not wait_gone(pids), "a Locust process outlived the benchmark"
    after = bench.start(CONCURRENCY="1", REQUESTS="2")  # the lock went with the first run
    out3, err3 = after.communicate(timeout=240)
    assert after.returncode == 0, out3[-2000:] + err3[-2000:]


def test_sigkill_of_the_benchmark_leaves_no_load_process(bench: Bench) -> None:
    """Even SIGKILL of the benchmark (no handler runs) ends its Locust master and workers (PR_SET_PDEATHSIG)."""
    proc = bench.start(CONCURRENCY="2", DURATION="60s", WORKERS="2")
    bench.wait_rows(proc, 3)
    pids = locust_pids(proc.pid)
    assert len(pids) >= 3, f"master and 2 workers expected: {pids}"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert not wait_gone(pids, 30), "Locust processes outlived the SIGKILLed benchmark"


def test_flags_reach_the_locust_processes_and_max_concurrency_caps_a_rate(bench: Bench) -> None:
    """``--logs-dir DIR --request-rate 4 --max-concurrency 2``: the Locust processes write the run's rows and request
    log under DIR, the sidecar's logs folder (their environment names another LOGS_DIR: they read the plan), and the
    report's config is 4 req/s with at most 2 in flight, as in `vllm bench serve`."""
    shared, elsewhere = bench.tmp / "logs", bench.tmp / "env-logs"
    proc = bench.start("--logs-dir", str(shared), "--request-rate", "4", "--max-concurrency", "2", "--requests", "6",
                       LOGS_DIR=str(elsewhere))  # fmt: skip
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    config = report_of(out)["config"]
    assert (config["mode"], config["rate_req_per_sec"], config["max_in_flight"]) == ("open_loop", 4.0, 2)
    logged = (shared / "requests.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(logged) >= 6 and list((shared / "runs").glob("*.requests.jsonl"))
    assert not (elsewhere / "requests.jsonl").exists()  # nothing where the environment pointed


def test_a_logs_dir_the_sidecar_cannot_see_stops_before_the_load(bench: Bench) -> None:
    """``--logs-dir`` elsewhere than the sidecar's LOGS_DIR: the sidecar could never read the rows, so the run stops
    after its warmup, before any measured load, saying both folders and what to do (exit 2); no report is written and
    the warmup rows stay in the flagged folder."""
    flagged = bench.tmp / "flagged-logs"
    proc = bench.start("--logs-dir", str(flagged), "--requests", "6", WARMUP="1")
    out, err = proc.communicate(timeout=240)
    said = out + err
    assert proc.returncode == 2, said[-3000:]
    assert "Running load test" not in said and str(bench.tmp / "logs" / "runs") in said and "--logs-dir" in said
    assert not list((bench.tmp / "reports").glob("benchmark_report_*.json"))
    rows = list((flagged / "runs").glob("*.requests.jsonl"))
    assert len(rows) == 1 and len(rows[0].read_text(encoding="utf-8").splitlines()) == 1  # the warmup's row


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_in_a_duration_run_cancels_the_requests_in_flight(bench: Bench, workers: str) -> None:
    """A closed-loop ``--duration`` run against slow answers (about 30 s each; the first two at once) gets Ctrl-C
    while its second requests run: they are cancelled at once, not drained (DRAIN_S 60 s here, 30 s by default), by
    one load process as by a master and its workers; their rows are kept as incomplete naming the early stop, the
    report of the rows so far is marked interrupted, exit 130."""
    port = free_port()
    slow = subprocess.Popen([APP_PY, "-m", "loadgen.selftest.mock_server", "--port", str(port), "--tokens", "20",
                             "--ttft-ms", "100", "--itl-ms", "1500", "--fast-answers", "2"], cwd=PROJECT_ROOT,
                            stdout=(bench.tmp / "slow.log").open("wb"), stderr=subprocess.STDOUT)  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 60)
        proc = bench.start("--concurrency", "2", "--duration", "300", DRAIN_S="60", WORKERS=workers,
                           VLLM_BASE_URL=f"http://127.0.0.1:{port}")  # fmt: skip
        bench.wait_rows(proc, 2)  # the first two answers ended: the next two are in flight, ~30 s to go
        pids = locust_pids(proc.pid)
        assert pids, "Locust is running"
        time.sleep(2)
        interrupted_at = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        ended_s = time.monotonic() - interrupted_at
    finally:
        slow.terminate()
        slow.wait(timeout=20)
    assert proc.returncode == 130, out[-3000:] + err[-3000:]
    # drained, they would end ≥ 26 s after Ctrl-C (their answers' 28 s left); cancelled, a busy host ends in < 20 s
    assert ended_s < 20, f"Ctrl-C took {ended_s:.0f} s: the requests in flight were drained, not cancelled"
    report = report_of(out)
    assert report["interrupted"] is True and report["metrics"]["requests_ok"] == 2
    rows = [json.loads(x) for p in (bench.tmp / "logs/runs").glob("*.requests.jsonl") for x in p.read_text().splitlines()]
    cut = [r for r in rows if r.get("error_kind") == "incomplete"]
    assert len(cut) == 2 and all("stopped early (SIGINT" in r["error"] for r in cut), cut
    assert not wait_gone(pids), "a Locust process outlived the benchmark"
