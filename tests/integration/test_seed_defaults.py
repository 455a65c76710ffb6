"""The seed's commands on the stack's OWN engine defaults (the default model, compiled, its dtype and KV pool for this
host), not the test engines' ``-O0`` tiny model: `./run_benchmark.sh` at the seed's 50 users and the shape of
`--concurrency 32 --duration 60`, each answered with a report (once 0 of 200 answered on an AVX2 host: vLLM emulated
bfloat16 there and stalled for minutes; docs/benchmarks.md, "The seed's commands on the stack's defaults")."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.settings import PROJECT_ROOT
from tests.integration.conftest import TEST_ENGINE_ENV, Stack, running_stack, stack_env

pytestmark = [pytest.mark.integration, pytest.mark.own_engine]

_BASE = 28120 + int(os.environ.get("TEST_PORT_OFFSET", "0"))
PORTS = {"UI_PORT": _BASE, "VLLM_PORT": _BASE + 1, "SIDECAR_PORT": _BASE + 2, "LOCUST_WEB_PORT": _BASE + 3,
         "REPLICA_PORT_BASE": _BASE + 10}  # fmt: skip
STALL = "No available shared memory broadcast block"
"""vLLM's line when one engine step has run for 60 s (vllm/distributed/device_communicators/shm_broadcast.py)."""


@pytest.fixture(scope="module")
def default_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`make up` with nothing set but ports, folders and secrets: the default model (its synthetic stand-in offline),
    vLLM compiled (no ``-O0``) in its own process layout, the dtype and KV pool the launcher chooses for this host's CPU."""
    tmp = tmp_path_factory.mktemp("seed-defaults")
    env = {**stack_env(tmp), **{k: str(v) for k, v in PORTS.items()}, "STARTUP_TIMEOUT_S": "1500"}
    for name in ("MODEL", "KV_CACHE_GB", "VLLM_DTYPE", "ENGINE_METRICS_INTERVAL_S", "UI_MAX_TOKENS", *TEST_ENGINE_ENV):
        env.pop(name, None)
    env["VLLM_EXTRA_ARGS"] = env["VLLM_EXTRA_ARGS"].replace("-O0", "").strip()  # only the test's API key remains
    with running_stack(env, tmp, up_timeout_s=1800) as s:
        yield s


def seed(stack: Stack, *argv: str) -> subprocess.CompletedProcess[str]:
    """``./run_benchmark.sh ARGV`` as a user types it after `make up`."""
    return subprocess.run([str(PROJECT_ROOT / "run_benchmark.sh"), *argv], cwd=PROJECT_ROOT, env=stack.env,
                          capture_output=True, text=True, timeout=1200)  # fmt: skip


def report_of(stdout: str) -> dict[str, Any]:
    """The JSON report whose path the command printed last."""
    line = next(x for x in reversed(stdout.splitlines()) if x.startswith("Benchmark completed. Report generated."))
    return json.loads(Path(line.rsplit("Report path: ", 1)[1].strip()).read_text(encoding="utf-8"))


def stalls_since(stack: Stack, offset: int) -> list[str]:
    """vLLM's 60-s stall lines written to ``vllm.log`` after byte ``offset``."""
    with (stack.logs_dir / "vllm.log").open("rb") as fh:
        fh.seek(offset)
        return [line for line in fh.read().decode(errors="replace").splitlines() if STALL in line]


def test_the_seed_run_benchmark_at_50_users_answers_every_request(default_stack: Stack) -> None:
    """`./run_benchmark.sh --requests 50 --max-tokens 32` (the seed's 50 users, warm-up and prompts; one request per
    user and 32-token answers for the suite's time: the engine steps that once stalled, 50 prefills at once, are all
    there, without the sampled lengths' long tail): every request answered, a report written, and no 60-s engine
    stall in vLLM's log."""
    offset = (default_stack.logs_dir / "vllm.log").stat().st_size
    run = seed(default_stack, "--requests", "50", "--max-tokens", "32")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "[INFO] Running load test: 50 concurrent users, 50 total requests" in run.stdout
    metrics = report_of(run.stdout)["metrics"]
    assert metrics["requests_ok"] == metrics["requests_total"] == 50, metrics
    assert not stalls_since(default_stack, offset)


def test_concurrency_32_for_a_duration_gives_successes_and_a_report(default_stack: Stack) -> None:
    """`./run_benchmark.sh --concurrency 32 --duration 30` (the seed's second command, shorter, with 32-token answers
    so the first wave ends within the run): answers, a report, no stall."""
    offset = (default_stack.logs_dir / "vllm.log").stat().st_size
    run = seed(default_stack, "--concurrency", "32", "--duration", "30", "--max-tokens", "32")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    metrics = report_of(run.stdout)["metrics"]
    assert metrics["requests_ok"] >= 32, metrics
    assert not stalls_since(default_stack, offset)
