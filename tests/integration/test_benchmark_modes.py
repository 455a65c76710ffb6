"""Benchmark engine on the real vLLM: closed and open loop, client-vs-server reconciliation, profiled runs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration


def report_of(stdout: str) -> dict[str, Any]:
    line = next(x for x in stdout.splitlines() if x.startswith("[REPORT] Baseline saved to "))
    return json.loads(Path(line.removeprefix("[REPORT] Baseline saved to ").strip()).read_text(encoding="utf-8"))


def test_closed_loop_reconciles_with_vllm_metrics(stack: Stack) -> None:
    """A closed-loop run's request and token counts equal vLLM's own /metrics deltas; latencies agree."""
    stack.wait_until_idle()  # the /metrics deltas are server-wide: only this run's requests may be in them
    run = stack.make(
        "benchmark",
        REQUESTS="12",
        CONCURRENCY="3",
        WARMUP="1",
        MAX_TOKENS="24",
        SLO="ttft_ms<=60000,e2e_ms<=120000",
        timeout_s=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = report_of(run.stdout)
    server = report["server"]
    assert server is not None and server["disagreements"] == [], server
    checks = {a["name"]: a for a in server["agreements"]}
    assert checks["requests_succeeded"]["client"] == checks["requests_succeeded"]["server"] == 12
    assert checks["generation_tokens"]["agrees"] and checks["prompt_tokens"]["agrees"]
    m = report["metrics"]
    assert m["goodput_percent"] == 100.0 and m["tpot"]["count"] == 12 and m["itl"]["count"] > 0
    assert m["output_lengths"]["requested_mean"] == 24
    assert "[SERVER] vLLM /metrics: 12 requests" in run.stdout and "agree" in run.stdout
    assert "\nKey insight:" in run.stdout
    # data once: the report's rows are the run's rows file (one file, two names), its plan carried the prompts,
    # and each request-log line names the run whose rows file holds its row
    rows = stack.reports_dir / report["requests_file"]
    (run_rows,) = [p for p in (stack.logs_dir / "runs").glob("*.requests.jsonl") if os.path.samefile(p, rows)]
    run_id = run_rows.name.removesuffix(".requests.jsonl")
    assert len(rows.read_text().splitlines()) == 13  # 12 measured + 1 warmup
    assert json.loads(run_rows.with_name(f"{run_id}.plan.json").read_text())["prompts"]
    lines = [json.loads(x) for x in (stack.logs_dir / "requests.jsonl").read_text().splitlines()]
    assert sum(line.get("run_id") == run_id for line in lines) == 12  # the Locust processes' rows (warmup: none)


def test_open_loop_run_at_a_rate(stack: Stack) -> None:
    """An open-loop run sends at RATE with Poisson gaps and records scheduled send times."""
    stack.wait_until_idle()  # its server agreement compares server-wide /metrics deltas
    run = stack.make("benchmark", REQUESTS="10", RATE="4", WARMUP="0", MAX_TOKENS="16", timeout_s=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = report_of(run.stdout)
    assert report["config"]["mode"] == "open_loop" and report["config"]["rate_req_per_sec"] == 4
    assert report["metrics"]["requests_ok"] == 10
    assert report["metrics"]["queue_delay"]["count"] == 10
    rows = [json.loads(x) for x in (stack.reports_dir / report["requests_file"]).read_text().splitlines()]
    assert all(r["scheduled_at"] is not None for r in rows)
    assert report["server"]["agreements"][0]["agrees"]


def test_rate_zero_and_bad_slo_are_refused(stack: Stack) -> None:
    """RATE=0 and an SLO that does not parse stop the run with the variable named."""
    zero = stack.make("benchmark", RATE="0", timeout_s=120)
    assert zero.returncode != 0 and "RATE=0" in zero.stdout + zero.stderr
    slo = stack.make("benchmark", SLO="ttft<500", timeout_s=120)
    assert slo.returncode != 0 and "SLO" in slo.stdout + slo.stderr and "ttft_ms<=500" in slo.stdout + slo.stderr
