"""The walking skeleton end to end: services answer, `make benchmark` writes a correct report, bad input is clear."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import httpx
import jsonschema
import pytest

from sidecar.reports.schema_export import json_schema
from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration


def test_every_service_answers(stack: Stack) -> None:
    """vLLM's /v1/models, the UI, Locust's web UI and the sidecar's /health all answer."""
    models = httpx.get(f"{stack.vllm_url}/v1/models", timeout=10, headers=stack.vllm_headers).json()
    assert models["data"][0]["id"] == "ernie-tiny-synthetic"
    assert httpx.get(stack.ui_url, timeout=10).status_code == 200
    assert httpx.get(stack.locust_url, timeout=10, follow_redirects=True).status_code == 200  # its login page
    health = httpx.get(f"{stack.sidecar_url}/health", timeout=10).json()
    assert health["status"] == "ok"
    assert (stack.logs_dir / "vllm.log").stat().st_size > 0


def test_second_make_up_is_a_no_op(stack: Stack) -> None:
    """`make up` on a running stack says so and changes nothing."""
    before = stack.service_pids()
    again = stack.make("up", timeout_s=120)
    assert again.returncode == 0 and "already running" in again.stdout
    assert stack.service_pids() == before


def test_make_status_lists_services(stack: Stack) -> None:
    """`make status` shows every service running and answering (vLLM behind the router on VLLM_PORT), and where the
    engine's last start spent its time."""
    status = stack.make("status", timeout_s=60)
    assert status.returncode == 0, status.stdout
    for name in ("vllm", "router", "sidecar", "ui", "locust"):
        assert f"{name}" in status.stdout
    assert status.stdout.count("RUNNING") == 5
    assert "vLLM startup: ready — ready after" in status.stdout  # the real vLLM log, read through the grammar
    assert "  last start " in status.stdout and "API server start + imports" in status.stdout, status.stdout


def test_benchmark_writes_a_correct_report(stack: Stack) -> None:
    """`make benchmark REQUESTS=20` prints the summary and writes a schema-valid report with sane figures."""
    run = stack.make("benchmark", REQUESTS="20", CONCURRENCY="4", WARMUP="2", MAX_TOKENS="32", timeout_s=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    assert "[INFO] Warmup completed: 2 requests" in out
    assert "[RESULT] Avg latency" in out and "P90" in out and "P99" in out
    assert "[RESULT] Throughput:" in out and "req/s" in out and "output tok/s" in out
    line = next(x for x in out.splitlines() if x.startswith("[REPORT] Baseline saved to "))
    path = line.removeprefix("[REPORT] Baseline saved to ").strip()
    assert path.startswith(str(stack.reports_dir)) and "benchmark_report_" in path
    report = json.loads(Path(path).read_text(encoding="utf-8"))
    jsonschema.validate(report, json_schema())
    m = report["metrics"]
    assert m["requests_ok"] == 20 and m["requests_failed"] == 0 and m["error_rate_percent"] == 0
    assert m["output_tokens_total"] > 0 and m["throughput_req_per_sec"] > 0 and m["output_tokens_per_sec"] > 0
    assert m["latency_p50_ms"] <= m["latency_p90_ms"] <= m["latency_p99_ms"]
    assert m["gpu_mem_peak_gb"] is None and m["vllm_rss_peak_gb"] > 0
    env = report["environment"]
    assert env["synthetic"] is True and env["vllm_version"] and env["served_model_name"] == "ernie-tiny-synthetic"
    startup = env["startup"]  # one place for the start-up facts of the real vLLM log
    assert startup["phase"] == "ready" and startup["cold_start_s"] > 0
    assert startup["model_load_s"] is not None and startup["engine_init_s"] > 0
    assert "KV cache size" in startup["kv_cache_line"]
    assert set(report["logs"]) == {"log_file", "found", "warnings_in_window", "errors_in_window"}
    assert report["config"]["concurrency"] == 4 and report["config"]["max_tokens"] == 32
    rows = [json.loads(x) for x in (stack.reports_dir / report["requests_file"]).read_text().splitlines()]
    measured = [r for r in rows if r["phase"] == "measured"]
    assert len(measured) == 20 and sum(r["phase"] == "warmup" for r in rows) == 2
    for r in measured:
        assert r["ok"] and 0 < r["ttft_ms"] < r["e2e_ms"], r
        assert r["output_tokens"] and r["output_tokens"] <= 32


def test_second_benchmark_compares_with_first(stack: Stack) -> None:
    """A second run of the same workload prints and records its comparison with the previous one."""
    args = {"REQUESTS": "8", "CONCURRENCY": "2", "WARMUP": "0", "MAX_TOKENS": "16"}
    first = stack.make("benchmark", timeout_s=600, **args)
    second = stack.make("benchmark", timeout_s=600, **args)
    assert first.returncode == 0 and second.returncode == 0, second.stdout + second.stderr
    assert "[COMPARE] vs_previous" in second.stdout


@pytest.mark.parametrize(
    ("var", "value", "needle"),
    [("CONCURRENCY", "0", "CONCURRENCY=0"), ("REQUESTS", "-1", "REQUESTS=-1"), ("DURATION", "abc", "DURATION=abc")],
)
def test_bad_benchmark_knobs_are_named(stack: Stack, var: str, value: str, needle: str) -> None:
    """Bad make variables fail fast with a message naming the variable."""
    run = stack.make("benchmark", timeout_s=120, **{var: value})
    assert run.returncode != 0
    assert needle in run.stdout + run.stderr


def test_benchmark_without_vllm_says_what_to_do(stack: Stack) -> None:
    """With vLLM unreachable, `make benchmark` stops before any load and points at `make up`."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    run = stack.make("benchmark", timeout_s=120, VLLM_BASE_URL=f"http://127.0.0.1:{dead}")
    assert run.returncode == 2
    assert "the server is not answering" in run.stderr and "make up" in run.stderr


def test_busy_port_is_reported(stack: Stack) -> None:
    """A launcher whose port is taken exits 2 and names the port and the variable to change."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        run = stack.python("-m", "sidecar.server", timeout_s=60, SIDECAR_PORT=str(port))
    assert run.returncode == 2
    assert f"Port {port}" in run.stderr and "SIDECAR_PORT" in run.stderr


def test_model_typo_is_a_clear_error(stack: Stack) -> None:
    """A model the user set that cannot be found fails with its name and cause, no fallback."""
    run = stack.python("-m", "engine.launcher", "--prepare-only", timeout_s=120, MODEL="Qwen/Qwn2-0.5B-Instruct")
    assert run.returncode == 2
    assert "Qwen/Qwn2-0.5B-Instruct" in run.stderr and "cannot be loaded" in run.stderr


def test_unknown_gate_baseline_fails_before_any_load(stack: Stack) -> None:
    """GATE naming no baseline stops before the warmup, naming the known baselines and how to mark one."""
    runs_before = set((stack.logs_dir / "runs").glob("*.requests.jsonl"))
    run = stack.make("benchmark", GATE="no-such-baseline", timeout_s=120)
    assert run.returncode == 2
    assert "GATE=no-such-baseline" in run.stderr and "make baseline NAME=no-such-baseline" in run.stderr
    assert set((stack.logs_dir / "runs").glob("*.requests.jsonl")) == runs_before
