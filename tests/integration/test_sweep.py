"""Sweeps, repeats and the load shapes of issue 19 on the real CPU vLLM: the automatic sweep with its SLO knee,
REPEAT intervals, a rate with a concurrency cap, a linear rate ramp, DATASET=random and multi-turn sessions."""

from __future__ import annotations

import itertools
import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Stack
from tests.integration.test_benchmark_modes import report_of

pytestmark = pytest.mark.integration


def series_of(stdout: str) -> dict[str, Any]:
    """The series report a sweep or repeat printed as ``[REPORT] Series saved to <path>``."""
    line = next(x for x in stdout.splitlines() if x.startswith("[REPORT] Series saved to "))
    return json.loads(Path(line.removeprefix("[REPORT] Series saved to ").strip()).read_text(encoding="utf-8"))


def rows_of(stack: Stack, report: dict[str, Any]) -> list[dict[str, Any]]:
    text = (stack.reports_dir / report["requests_file"]).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if json.loads(line)["phase"] == "measured"]


def prefix_cache_hits(stack: Stack) -> float:
    """vLLM's prefix-cache hit counter (tokens)."""
    text = httpx.get(f"{stack.engine_url}/metrics", timeout=10).text
    match = re.search(r"^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)$", text, re.MULTILINE)
    assert match, "vLLM exposes no prefix-cache counter"
    return float(match.group(1))


def test_auto_sweep_reports_curves_and_the_knee_within_minutes(stack: Stack) -> None:
    """make sweep (auto): synchronous, maximum throughput and 2 rates between, each a normal report, in under 5 min;
    the series HTML has the latency and goodput curves, and the knee is the highest point meeting the stated SLO."""
    started = time.monotonic()
    run = stack.make(
        "sweep", DURATION="3s", CONCURRENCY="4", MAX_TOKENS="16", WARMUP="2", COOLDOWN_S="0", SWEEP_RATES="2",
        SLO="ttft_ms<=2000,e2e_ms<=4000", timeout_s=600,
    )
    elapsed_s = time.monotonic() - started
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert elapsed_s <= 300, f"the automatic sweep took {elapsed_s:.0f} s"
    series = series_of(run.stdout)
    kinds = [p["kind"] for p in series["points"]]
    assert kinds == ["synchronous", "rate", "rate", "throughput"] and series["sweep"] == "auto"
    rates = [p["rate_req_per_sec"] for p in series["points"][1:3]]
    assert rates == sorted(rates)
    for point in series["points"]:
        assert len(point["report_ids"]) == 1
        assert (stack.reports_dir / f"{point['report_ids'][0]}.json").exists()
    meeting = [i for i, p in enumerate(series["points"]) if p["meets_slo"]]
    assert meeting, series["points"]
    assert series["knee"]["index"] == max(meeting)
    assert f"[KNEE] Knee (SLO ttft_ms<=2000,e2e_ms<=4000 in >=95% of requests): {series['knee']['label']}:" in run.stdout
    page = (stack.reports_dir / series["html_file"]).read_text(encoding="utf-8")
    assert page.count("data:image/png;base64,") == 2 and "Latency against load" in page and "Knee (SLO" in page


def test_repeat_three_runs_gives_confidence_intervals(stack: Stack) -> None:
    """REPEAT=3: three reports of one point and a series with the mean and a 95 % interval of every headline
    metric, printed as mean ± half width."""
    run = stack.make("benchmark", REPEAT="3", DURATION="3s", CONCURRENCY="2", MAX_TOKENS="16", WARMUP="1",
                     COOLDOWN_S="1", timeout_s=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    series = series_of(run.stdout)
    (point,) = series["points"]
    assert len(point["report_ids"]) == 3 and series["repeat"] == 3
    for name in ("throughput_req_per_sec", "ttft_p99_ms", "itl_p99_ms", "e2e_p99_ms", "output_tokens_per_sec"):
        interval = point["metrics"][name]
        assert interval["n"] == 3 and interval["low"] <= interval["mean"] <= interval["high"], (name, interval)
    assert re.search(r"\[REPEAT\] concurrency 2 \(3 run\(s\)\): [\d.]+ ± [\d.]+", run.stdout)


def test_rate_with_a_concurrency_cap(stack: Stack) -> None:
    """RATE=50 with MAX_IN_FLIGHT=2 (vllm bench serve's --request-rate with --max-concurrency): never more than 2
    requests in flight, arrivals wait for a slot and that wait counts (queue delay); vLLM saw every request."""
    run = stack.make("benchmark", RATE="50", MAX_IN_FLIGHT="2", REQUESTS="16", WARMUP="0", MAX_TOKENS="24",
                     timeout_s=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = report_of(run.stdout)
    assert report["config"]["max_in_flight"] == 2 and report["config"]["mode"] == "open_loop"
    assert report["metrics"]["requests_ok"] == 16 and report["metrics"]["peak_concurrency"] <= 2
    assert report["metrics"]["queue_delay"]["p50_ms"] > 0
    assert "open loop at 50 req/s, at most 2 in flight" in run.stdout
    checks = {a["name"]: a for a in report["server"]["agreements"]}
    assert checks["requests_succeeded"]["server"] == 16


def test_linear_rate_ramp(stack: Stack) -> None:
    """RATE=2 RATE_END=16 over 6 s: the second half of the run schedules well over the first half's arrivals
    (expected about 37 against 17), and the report records the ramp."""
    run = stack.make("benchmark", RATE="2", RATE_END="16", DURATION="6s", WARMUP="0", MAX_TOKENS="8", timeout_s=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = report_of(run.stdout)
    assert report["config"]["rate_end_req_per_sec"] == 16
    scheduled = sorted(r["scheduled_at"] for r in rows_of(stack, report))
    first = sum(1 for t in scheduled if t - scheduled[0] < 3.0)
    assert len(scheduled) - first > 1.5 * first, (first, len(scheduled))
    assert "open loop at 2 req/s ramping to 16 req/s" in run.stdout


def test_random_dataset_has_exact_input_lengths(stack: Stack) -> None:
    """DATASET=random RANDOM_INPUT_LEN=100: the server's usage.prompt_tokens is exactly 100 for every request
    (chat template included), and RANDOM_OUTPUT_LEN=8 with IGNORE_EOS gives exactly 8 output tokens."""
    run = stack.make("benchmark", DATASET="random", RANDOM_INPUT_LEN="100", RANDOM_OUTPUT_LEN="8", IGNORE_EOS="1",
                     REQUESTS="8", CONCURRENCY="2", WARMUP="1", timeout_s=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = report_of(run.stdout)
    assert report["config"]["dataset"] == "random" and report["config"]["input_len_tokens"] == 100
    rows = rows_of(stack, report)
    assert len(rows) == 8
    assert {(r["prompt_tokens"], r["output_tokens"], r["output_tokens_source"]) for r in rows} == {(100, 8, "usage")}
    prompts = [json.loads(x)["prompt"] for x in Path(report["config"]["dataset_file"]).read_text().splitlines()]
    assert len(set(prompts)) == len(prompts)  # no two requests share a prompt


def test_multi_turn_sessions_carry_the_answers(stack: Stack) -> None:
    """SESSION_TURNS=3: later turns' prompts hold the earlier turns and the model's answers (each turn's prompt is
    at least the previous prompt plus its answer), and vLLM's prefix cache hits the shared history."""
    hits_before = prefix_cache_hits(stack)
    run = stack.make("benchmark", SESSION_TURNS="3", INPUT_MIX="medium:1", REQUESTS="9", CONCURRENCY="1",
                     WARMUP="0", MAX_TOKENS="64", timeout_s=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = report_of(run.stdout)
    assert report["config"]["session_turns"] == 3 and "in 3-turn conversations" in run.stdout
    sessions: dict[str, list[dict[str, Any]]] = {}
    for row in rows_of(stack, report):
        sessions.setdefault(row["session_id"], []).append(row)
    assert len(sessions) == 3
    for turns in sessions.values():
        turns.sort(key=lambda r: r["turn"])
        assert [r["turn"] for r in turns] == [1, 2, 3]
        for before, after in itertools.pairwise(turns):
            assert after["prompt_tokens"] >= before["prompt_tokens"] + before["output_tokens"], turns
    assert prefix_cache_hits(stack) - hits_before >= 128  # at least one cached block (vLLM's block: 128 tokens)
    turns = report["metrics"]["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert turns[0]["prompt_tokens_mean"] < turns[1]["prompt_tokens_mean"] < turns[2]["prompt_tokens_mean"]
    assert "[TURN] turn 1:" in run.stdout and "[RESULT] Sessions: 3 sessions" in run.stdout
