"""The seed image's commands, as its readers type them: `./run_benchmark.sh ...` and `./log_analyze.sh ...`.

(`./start_vllm.sh` is tested in test_model_switch.py: it restarts vLLM, so it runs late.)
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from core.enginestate import read_engine_state
from core.settings import PROJECT_ROOT
from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

SEED_ORDER = (
    "[INFO] Starting benchmark for ",
    "[INFO] Warmup completed: ",
    "[INFO] Running load test: ",
    "[RESULT] Avg latency: ",
    "[RESULT] Throughput: ",
    "[REPORT] Baseline saved to ",
    "Benchmark completed. Report generated. Report path: ",
    "Key insight: ",
)


def script(stack: Stack, name: str, *argv: str, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    """Run ``./<name> ARGV`` from the project root with the test stack's environment."""
    return subprocess.run([str(PROJECT_ROOT / name), *argv], cwd=PROJECT_ROOT, env=stack.env, capture_output=True,
                          text=True, timeout=timeout_s)


def report_of(stdout: str) -> dict[str, Any]:
    line = next(x for x in stdout.splitlines() if x.startswith("[REPORT] Baseline saved to "))
    return json.loads(Path(line.removeprefix("[REPORT] Baseline saved to ").strip()).read_text(encoding="utf-8"))


def seed_lines_in_order(stdout: str) -> list[str]:
    """The lines starting with the seed's prefixes, in the order they were printed (first of each)."""
    lines = stdout.splitlines()
    found = []
    for prefix in SEED_ORDER:
        index = next(i for i, line in enumerate(lines) if line.startswith(prefix))
        found.append((index, lines[index]))
    assert [i for i, _ in found] == sorted(i for i, _ in found), found
    return [line for _, line in found]


def test_run_benchmark_with_concurrency_and_duration(stack: Stack) -> None:
    """`./run_benchmark.sh --concurrency 2 --duration 10` runs 2 users for 10 s and prints the seed's lines in
    the seed's order, then writes the report with its CSV exports."""
    run = script(stack, "run_benchmark.sh", "--concurrency", "2", "--duration", "10", "--warmup", "1",
                 "--max-tokens", "16")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    lines = seed_lines_in_order(run.stdout)
    assert lines[0] == "[INFO] Starting benchmark for ernie-tiny-synthetic (vLLM backend)"
    assert lines[1] == "[INFO] Warmup completed: 1 requests"
    assert lines[2] == "[INFO] Running load test: 2 concurrent users, for 10 s"
    assert "GPU memory usage: n/a (no GPU" in lines[4] and "vLLM RSS peak" in lines[4]
    report = report_of(run.stdout)
    assert report["config"]["concurrency"] == 2 and report["config"]["duration_s"] == 10.0
    assert lines[6].endswith(f"{report['report_id']}.json")
    folder = stack.reports_dir
    rows = list(csv.DictReader((folder / report["csv_file"]).open(encoding="utf-8")))
    assert len(rows) == report["metrics"]["requests_total"] + report["metrics"]["requests_incomplete"] + 1  # + warmup
    (summary,) = csv.DictReader((folder / f"{report['report_id']}.summary.csv").open(encoding="utf-8"))
    assert summary["report_id"] == report["report_id"]


def test_run_benchmark_with_profile(stack: Stack) -> None:
    """`./run_benchmark.sh --concurrency 2 --requests 4 --profile`: Chrome traces of the run, linked from the report;
    the profiled run is no baseline (the profiler slows the engine) and says so; afterwards vLLM runs without its
    profiler again."""
    run = script(stack, "run_benchmark.sh", "--concurrency", "2", "--requests", "4", "--warmup", "1",
                 "--max-tokens", "8", "--profile")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    line = next(x for x in run.stdout.splitlines() if x.startswith("[REPORT] Report saved to "))
    assert line.endswith("(not a baseline: was profiled (PROFILE=1: vLLM's torch profiler slows the engine through "
                         "its window))"), line  # fmt: skip
    report = json.loads(Path(line.removeprefix("[REPORT] Report saved to ").split(" (not a baseline")[0]).read_text())
    assert report["config"]["profiled"] is True
    profile = report["profile"]
    assert profile and profile["files"]
    events = 0
    for name in profile["files"]:
        raw = (stack.reports_dir / profile["dir"] / name).read_bytes()
        events += len(json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)["traceEvents"])
    assert events > 100 and "[PROFILE]" in run.stdout
    state = read_engine_state(stack.engine_state_file)
    assert state is not None and not state.profiler and "--profiler-config" not in state.argv


def test_run_benchmark_help_and_bad_flags(stack: Stack) -> None:
    """`--help` lists the benchmark's knobs in at most 120 lines; a misspelt flag exits 2 with the nearest one, an
    engine knob exits 2 saying where it goes."""
    helped = script(stack, "run_benchmark.sh", "--help", timeout_s=120)
    text = " ".join(helped.stdout.split())  # argparse wraps the help lines
    assert helped.returncode == 0 and "--max-concurrency" in text and "Concurrent users [50]" in text
    assert len(helped.stdout.splitlines()) <= 120 and "--kv-cache-gb" not in text
    bad = script(stack, "run_benchmark.sh", "--concurency", "3", timeout_s=120)
    assert bad.returncode == 2 and "did you mean --concurrency?" in bad.stderr
    foreign = script(stack, "run_benchmark.sh", "--kv-cache-gb", "4", timeout_s=120)
    assert foreign.returncode == 2 and "./start_vllm.sh --kv-cache-gb 4, or KV_CACHE_GB=4 make up" in foreign.stderr


def test_vllm_log_shows_requests_and_ready_lines_not_the_stacks_polling(stack: Stack) -> None:
    """`logs/vllm.log` after a benchmark: the two ready lines (docs/seed-commands.md's grep) each with a time, the chat
    requests' access lines, and none of the stack's own polling (the sidecar's /metrics, the checks' /health and
    /v1/models)."""
    bench = script(stack, "run_benchmark.sh", "--requests", "2", "--concurrency", "1", "--warmup", "0")
    assert bench.returncode == 0, bench.stdout[-2000:] + bench.stderr[-2000:]
    lines = stack.vllm_log_file.read_text(encoding="utf-8", errors="replace").splitlines()
    ready = [line for line in lines if "Starting vLLM server" in line or "Application startup complete" in line]
    assert len(ready) >= 2 and all(re.search(r"\d\d-\d\d \d\d:\d\d:\d\d", line) for line in ready), ready
    assert any('"POST /v1/chat/completions' in line for line in lines)
    polled = [line for line in lines if re.search(r'"GET /(metrics|health|v1/models|version) ', line)]
    assert not polled, polled[:5]


@pytest.mark.parametrize("report", ["--errors", "--slow", "--stats"])
def test_log_analyze(stack: Stack, report: str) -> None:
    """`./log_analyze.sh --errors | --slow | --stats` read the stack's logs and answer."""
    if not (stack.logs_dir / "requests.jsonl").exists():  # run alone: give the request log a few lines first
        bench = script(stack, "run_benchmark.sh", "--requests", "2", "--concurrency", "1", "--warmup", "0")
        assert bench.returncode == 0, bench.stdout[-2000:] + bench.stderr[-2000:]
    run = script(stack, "log_analyze.sh", report, "--json", timeout_s=120)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    key = report.removeprefix("--")
    assert key in data
    if key == "stats":
        assert data["stats"]["requests"]["requests"] > 0  # the benchmarks above logged their requests
