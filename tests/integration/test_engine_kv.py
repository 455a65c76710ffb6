"""vLLM's KV cache on the real CPU build: the sized pool reaches vLLM, and reports carry the pool and its peak usage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.settings import PROJECT_ROOT
from core.units import GIB
from engine.kvsizing import geometry_from_config, plan_kv
from sidecar.sampling.enginemetrics import parse_gauges
from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration


def report_of(stdout: str) -> dict[str, Any]:
    line = next(x for x in stdout.splitlines() if x.startswith("[REPORT] Baseline saved to "))
    return json.loads(Path(line.removeprefix("[REPORT] Baseline saved to ").strip()).read_text(encoding="utf-8"))


def planned_tokens(stack: Stack) -> int:
    """Tokens the launcher planned for the test stack's model and KV_CACHE_GB (from the model's config.json)."""
    config = json.loads((PROJECT_ROOT / "models" / "tiny" / "config.json").read_text())
    plan = plan_kv(float(stack.env["KV_CACHE_GB"]), None, geometry_from_config(config))
    assert plan.tokens is not None
    return plan.tokens


def test_vllm_runs_with_the_planned_pool_and_context(stack: Stack) -> None:
    """vLLM's own /metrics and /v1/models show the pool (bytes, tokens) and the context length the launcher set."""
    g = parse_gauges(httpx.get(f"{stack.engine_url}/metrics", timeout=10).text)
    assert g.pool_bytes == int(float(stack.env["KV_CACHE_GB"]) * GIB)
    assert g.pool_tokens == planned_tokens(stack)
    model = httpx.get(f"{stack.vllm_url}/v1/models", timeout=10, headers=stack.vllm_headers).json()["data"][0]
    assert model["max_model_len"] == 4096
    argv = json.loads(stack.engine_state_file.read_text())["argv"]
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(g.pool_bytes)


def test_report_carries_pool_and_peak_kv_usage(stack: Stack) -> None:
    """A benchmark's report has vLLM's KV pool, a non-zero peak usage sampled during the run, the queue peaks and
    the preemption count; the summary prints them and says the run was not KV-bound."""
    run = stack.make(
        "benchmark", REQUESTS="24", CONCURRENCY="4", WARMUP="2", MAX_TOKENS="64", IGNORE_EOS="1", timeout_s=600
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = report_of(run.stdout)
    kv = report["resources"]["kv_cache"]
    assert kv["pool_tokens"] == planned_tokens(stack) and kv["pool_gb"] == float(stack.env["KV_CACHE_GB"])
    assert kv["samples"] >= 2 and kv["usage_peak_percent"] > 0 and 1 <= kv["requests_running_peak"] <= 4
    assert report["metrics"]["kv_cache_usage_peak_percent"] == kv["usage_peak_percent"]
    assert report["metrics"]["kv_cache_gb"] == kv["pool_gb"] and report["metrics"]["kv_bound"] is None
    assert report["server"]["preemptions"] == 0
    assert any(p["kv_cache_usage_percent"] for p in report["resources"]["timeline"])
    assert any(x.startswith("[RESULT] KV cache") and "not KV-bound" in x for x in run.stdout.splitlines())


def test_make_status_shows_cold_and_warm_starts(stack: Stack) -> None:
    """`make status` states how long vLLM's starts took (the first in the log is the cold one)."""
    status = stack.make("status", timeout_s=60)
    assert "  starts: cold " in status.stdout, status.stdout
