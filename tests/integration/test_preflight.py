"""Before any load, `python -m loadgen.command.benchmark` refuses what cannot work, in the server's and the gate's own words.

Real processes, no vLLM: the mock server (which refuses, as vLLM does, a ``max_tokens`` beyond its context) and the
real sidecar on free ports, each test with its own reports folder.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core.net import free_port
from core.settings import PROJECT_ROOT
from tests.integration.conftest import wait_http

pytestmark = [pytest.mark.integration, pytest.mark.stack_lane]  # lane stack: balances the lanes
APP_PY = str(PROJECT_ROOT / ".venvs/app/bin/python")
TOKEN = "preflight-test-token"



Bench = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def services(tmp_path: Path) -> Iterator[tuple[dict[str, str], Callable[..., str]]]:
    """The sidecar (own reports folder) and a starter of mock servers; all stopped at the end."""
    procs: list[subprocess.Popen[bytes]] = []
    sidecar_port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"MODEL", "VLLM_BASE_URL", "SIDECAR_BASE_URL", "GATE"}}
    env.update(
        SIDECAR_PORT=str(sidecar_port),
        SIDECAR_TOKEN=TOKEN,
        LOGS_DIR=str(tmp_path / "logs"),
        REPORTS_DIR=str(tmp_path / "reports"),
        RUN_DIR=str(tmp_path / "run"),
        PYTHONUNBUFFERED="1",
    )

    def mock(*args: str) -> str:
        port = free_port()
        procs.append(subprocess.Popen([APP_PY, "-m", "loadgen.selftest.mock_server", "--port", str(port), "--ttft-ms", "20",
                                       "--itl-ms", "5", *args], cwd=PROJECT_ROOT, env=env,
                                      stderr=subprocess.DEVNULL))
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/health", 30)
        return url

    first = mock()
    procs.append(subprocess.Popen([APP_PY, "-m", "sidecar.server"], cwd=PROJECT_ROOT,
                                  env={**env, "VLLM_BASE_URL": first}, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL))
    wait_http(f"http://127.0.0.1:{sidecar_port}/health", 60)
    try:
        yield env, mock
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)


def run_bench(env: dict[str, str], url: str, *flags: str, **knobs: str) -> subprocess.CompletedProcess[str]:
    """`python -m loadgen.command.benchmark` against ``url`` (two users, four requests, two warmup requests by default)."""
    all_env = {**env, "VLLM_BASE_URL": url, "WARMUP": "2", "CONCURRENCY": "2", "REQUESTS": "4", **knobs}
    return subprocess.run([APP_PY, "-m", "loadgen.command.benchmark", *flags], cwd=PROJECT_ROOT, env=all_env,
                          capture_output=True, text=True, timeout=300)


def rows_written(env: dict[str, str]) -> int:
    """Rows of every run so far (warmup included): 0 means nothing was sent."""
    runs = Path(env["LOGS_DIR"]) / "runs"
    return sum(len(p.read_text().splitlines()) for p in runs.glob("*.requests.jsonl")) if runs.exists() else 0


def test_max_tokens_beyond_the_context_is_refused_before_any_load(
    services: tuple[dict[str, str], Callable[..., str]],
) -> None:
    """MAX_TOKENS=99999 against a 4096-token model: exit 2 naming the knob and both numbers; nothing sent."""
    env, mock = services
    run = run_bench(env, mock(), MAX_TOKENS="99999")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "MAX_TOKENS=99999 cannot fit" in run.stderr and "max_model_len=4096" in run.stderr, run.stderr
    assert "Nothing was sent" in run.stderr and rows_written(env) == 0
    sampled = run_bench(env, mock(), OUTPUT_LEN_CAP="5000")  # the sampled lengths' cap is held to the context too
    assert sampled.returncode == 2 and "OUTPUT_LEN_CAP=5000" in sampled.stderr, sampled.stderr


def test_every_warmup_request_failing_stops_with_the_servers_reason(
    services: tuple[dict[str, str], Callable[..., str]],
) -> None:
    """A server that does not list its context refuses every warmup request: the run stops before the measured
    window with the server's message, counted (exit 4); without warmup the summary says the causes in words, and
    the failed run is not marked as a baseline (it could judge nothing)."""
    env, mock = services
    url = mock("--unlisted-context")
    run = run_bench(env, url, MAX_TOKENS="99999")
    assert run.returncode == 4, run.stdout + run.stderr
    assert "every warmup request failed (2 of 2): http_status 2 (max_tokens=99999 cannot be greater than " \
           "max_model_len=4096)" in run.stderr, run.stderr
    assert "Running load test" not in run.stdout
    measured = run_bench(env, url, "--baseline", "v2", MAX_TOKENS="99999", WARMUP="0", REQUESTS="2")
    assert measured.returncode == 4, measured.stdout + measured.stderr
    assert "errors 100.0%: http_status 2 (max_tokens=99999 cannot be greater than max_model_len=4096)" \
        in measured.stdout, measured.stdout
    assert "{'http_status'" not in measured.stdout
    assert "[WARN] baseline v2 not marked:" in measured.stdout and "has no successful request" in measured.stdout


def test_gate_against_another_workload_is_refused_before_any_load(
    services: tuple[dict[str, str], Callable[..., str]],
) -> None:
    """GATE=v1 where v1 ran another workload: the gate's own line, exit 2, before warmup; the same workload runs
    and passes. Marking v1 again says what it pointed at before."""
    env, mock = services
    url = mock()
    first = run_bench(env, url, "--baseline", "v1", TEMPERATURE="0.7")
    assert first.returncode == 0, first.stdout + first.stderr
    before = rows_written(env)
    refused = run_bench(env, url, CONCURRENCY="3", GATE="v1")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "[GATE] ERROR vs v1: not comparable: workload differs from benchmark_report_" in refused.stderr
    assert "concurrency: 2 -> 3; temperature: 0.7 -> 0.0" in refused.stderr, refused.stderr
    assert rows_written(env) == before and "Warmup" not in refused.stdout
    time.sleep(1.1)  # report ids have a one-second resolution
    again = run_bench(env, url, "--baseline", "v1", GATE="v1", TEMPERATURE="0.7", GATE_THRESHOLD_PCT="1000")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "[GATE] PASS vs v1" in again.stdout
    assert "[BASELINE] v1 moved: was benchmark_report_" in again.stdout, again.stdout


def test_gate_against_a_series_of_another_workload_is_refused_before_any_load(
    services: tuple[dict[str, str], Callable[..., str]],
) -> None:
    """GATE=s1 where s1 is a REPEAT series of another workload: refused before any load (exit 2), naming the
    series and the fields that differ."""
    env, mock = services
    url = mock()
    first = run_bench(env, url, "--baseline", "s1", REPEAT="2", WARMUP="0", COOLDOWN_S="0")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "[BASELINE] s1 -> benchmark_series_" in first.stdout
    before = rows_written(env)
    refused = run_bench(env, url, REPEAT="2", CONCURRENCY="3", GATE="s1")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "[GATE] ERROR vs s1: not comparable: no load point of benchmark_series_" in refused.stderr
    assert "concurrency: 2 -> 3" in refused.stderr and rows_written(env) == before
