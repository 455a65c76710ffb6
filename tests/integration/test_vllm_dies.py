"""vLLM dying in the middle of a benchmark: the report is still written, failures counted by cause.

Runs last (``stack_order(4)``) because it kills the session stack's vLLM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import psutil
import pytest

from core.settings import PROJECT_ROOT
from tests.integration.conftest import Stack, report_path

pytestmark = [pytest.mark.integration, pytest.mark.stack_order(4)]


def run_files(stack: Stack) -> set[Path]:
    return set((stack.logs_dir / "runs").glob("*.requests.jsonl"))


def measured_rows(stack: Stack, old: set[Path]) -> int:
    new = sorted(run_files(stack) - old, key=lambda p: p.stat().st_mtime)
    if not new:
        return 0
    return sum('"phase":"measured"' in line for line in new[-1].read_text().splitlines())


def test_report_survives_vllm_death(stack: Stack) -> None:
    """Killing vLLM mid-run still yields a report whose failures are counted by cause (nothing lost)."""
    env = {**stack.env, "REQUESTS": "400", "CONCURRENCY": "4", "WARMUP": "0", "MAX_TOKENS": "64"}
    old = run_files(stack)
    proc = subprocess.Popen(
        ["make", "benchmark"], cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 300
        while measured_rows(stack, old) < 8 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        if proc.poll() is not None:
            pytest.fail(f"benchmark ended before vLLM was killed:\n{proc.communicate()[0][-3000:]}")
        assert measured_rows(stack, old) >= 8, "benchmark produced no rows"
        pid = json.loads(stack.engine_state_file.read_text())["pid"]
        left = psutil.Process(pid).children(recursive=True)  # engine core, resource_tracker: orphaned by the kill
        os.kill(pid, signal.SIGKILL)  # a hard crash of the API server
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    # the server-down breaker ends the run SERVER_DOWN_S after vLLM stopped answering (exit 6), instead of
    # retrying the dead server until the planned requests are spent
    assert proc.returncode == 2 and "Error 6" in out, out[-3000:]  # make's own 2, the benchmark's 6
    assert "[ERROR] vLLM stopped answering at " in out and "the run was ended early" in out
    report = json.loads(report_path(out).read_text(encoding="utf-8"))
    assert "[REPORT] Report saved to " in out and "(not a baseline: " in out  # server down: it can judge nothing
    m = report["metrics"]
    assert report["server_down"] and m["requests_total"] < 400
    assert m["requests_ok"] >= 8 and m["requests_failed"] > 0
    assert m["requests_ok"] + m["requests_failed"] == m["requests_total"]
    # straight to vLLM: refused; behind the stack's router: its answers that no engine can be reached (HTTP 5xx)
    assert set(report["errors"]["by_kind"]) <= {"connection", "no_done", "timeout", "http_status"}
    assert sum(report["errors"]["by_kind"].values()) == m["requests_failed"]
    assert {"connection", "http_status"} & set(report["errors"]["by_kind"])
    status = stack.make("status")
    assert "vLLM startup: stopped — died after being ready" in status.stdout, status.stdout
    startup = httpx.get(f"{stack.sidecar_url}/startup", timeout=30).json()
    assert startup["phase"] == "stopped" and startup["detail"].startswith("died after being ready"), startup
    down = stack.make("down")  # the fixture's own `make down` then finds nothing to do
    assert down.returncode == 0, down.stdout + down.stderr
    alive = [p.pid for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"make down left the crashed vLLM's processes: {alive}\n{down.stdout}"
