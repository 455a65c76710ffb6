"""Sweep planning and the series loop (loadgen/orchestrate/pipeline.py), the load shapes' pure parts (rate ramp, concurrency cap,
random-dataset order, multi-turn conversations) and their settings."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from core.distributions import ramp_arrival_gaps_s
from core.flags import build_parser, settings_from
from core.report_schema import BenchmarkConfig
from core.settings import Settings
from loadgen.orchestrate.pipeline import RunResult, auto_rates, planned_points, run_series
from loadgen.plan import auto_workers, bench_config
from loadgen.workloads.dataset import Prompt
from loadgen.workloads.workload import WorkloadSampler
from tests.unit.sidecar.test_sidecar_store import report


def knobs(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_auto_rates_are_spread_evenly_between_the_two_measured_points() -> None:
    """Two rates between 1 and 4 req/s are 2 and 3; the ends swap when the maximum point was slower."""
    assert auto_rates(1.0, 4.0, 2) == [2.0, 3.0]
    assert auto_rates(4.0, 1.0, 2) == [2.0, 3.0]
    assert auto_rates(0.5, 0.5, 3) == [0.5]


def test_explicit_sweeps_plan_closed_and_open_loop_points() -> None:
    """concurrency:1,4 gives closed-loop points of 1 and 4 users; rate:0.5,2 open-loop points (Poisson)."""
    closed = knobs(sweep="concurrency:4,1", duration=5)
    points = planned_points(closed, bench_config(closed, "m"))
    assert [(p.label, plan.concurrency, plan.mode) for p, plan in points] == [
        ("concurrency 1", 1, "closed_loop"), ("concurrency 4", 4, "closed_loop")]
    rates = knobs(sweep="rate:0.5,2", duration=5)
    points = planned_points(rates, bench_config(rates, "m"))
    assert [(plan.rate_req_per_sec, plan.burstiness, plan.mode) for _, plan in points] == [
        (0.5, 1.0, "open_loop"), (2.0, 1.0, "open_loop")]


def test_every_sweep_point_gets_the_load_processes_for_its_own_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """On 16 cores, concurrency:1,512 from a 50-user base: 1 process for 1 user and the automatic count for 512 (the
    points once kept the base point's count); WORKERS=3 is kept, capped at 1 user."""
    monkeypatch.setattr("loadgen.plan.usable_cores", lambda: 16)
    auto = knobs(sweep="concurrency:1,512", duration=5, concurrency=50)
    base = bench_config(auto, "m")
    one, many = (plan.workers for _, plan in planned_points(auto, base))
    assert one == 1 and many == auto_workers(512, None, 120.0, None, 16) and many > base.workers
    fixed = knobs(sweep="concurrency:1,512", duration=5, concurrency=50, workers=3)
    assert [plan.workers for _, plan in planned_points(fixed, bench_config(fixed, "m"))] == [1, 3]


def test_auto_series_runs_sync_and_max_first_then_rates_and_reports_in_load_order() -> None:
    """SWEEP=auto with 2 rates and REPEAT=2: 8 runs; the rates come from the two measured throughputs (1 and 4
    req/s); warmup only in the first run; points end in load order: synchronous, rates, maximum."""
    settings = knobs(sweep="auto", sweep_rates=2, repeat=2, cooldown_s=0, duration=5, concurrency=8, warmup=3)
    throughput = {1: 1.0, 8: 4.0}
    plans = []

    def run_point(plan: BenchmarkConfig) -> RunResult:
        plans.append(plan)
        value = plan.rate_req_per_sec or throughput[plan.concurrency]
        return RunResult(report(f"benchmark_report_20260101_12{len(plans):04d}", throughput=value))

    runs = run_series(settings, bench_config(settings, "m"), run_point, out=lambda line: None)
    assert [p.label for p in runs.points] == ["synchronous", "rate 2 req/s", "rate 3 req/s",
                                             "maximum throughput (concurrency 8)"]
    assert [len(p.report_ids) for p in runs.points] == [2, 2, 2, 2] and not runs.interrupted
    assert [p.warmup_requests for p in plans] == [3] + [0] * 7


def test_a_run_interrupted_ends_the_series_with_what_was_measured() -> None:
    """Ctrl-C in the second run: its report counts, no further run starts, the series says interrupted."""
    settings = knobs(sweep="concurrency:1,2,4", cooldown_s=0, duration=5)
    calls = itertools.count(1)

    def run_point(plan: BenchmarkConfig) -> RunResult:
        n = next(calls)
        return RunResult(report(f"benchmark_report_20260101_1200{n:02d}"), interrupted=n == 2)

    runs = run_series(settings, bench_config(settings, "m"), run_point, out=lambda line: None)
    assert [p.label for p in runs.points] == ["concurrency 1", "concurrency 2"] and runs.interrupted


def test_ramp_gaps_follow_the_linear_rate() -> None:
    """A 2 -> 18 req/s ramp over 10 s: about 25 arrivals in the first half (mean rate 6) and 65 in the second
    (mean rate 14); after the duration the rate stays at the end rate."""
    gaps = ramp_arrival_gaps_s(2.0, 18.0, 1.0, seed=3, duration_s=10.0)
    times = np.cumsum([next(gaps) for _ in range(400)])
    first, second = int(np.sum(times < 5)), int(np.sum((times >= 5) & (times < 10)))
    assert 15 <= first <= 35 and 50 <= second <= 80
    late = times[times > 20]
    assert np.mean(np.diff(late)) == pytest.approx(1 / 18, rel=0.25)
    with pytest.raises(ValueError, match="DURATION or REQUESTS"):
        next(ramp_arrival_gaps_s(1.0, 2.0, 1.0, 0))


def test_load_shape_settings_and_their_errors() -> None:
    """MAX_IN_FLIGHT caps the open loop (CONCURRENCY with RATE does not: it is the closed loop's users) and needs
    RATE or an open-loop sweep; RATE_END needs RATE; sessions run in either loop but not in SWEEP=auto (its rates
    are request rates), THINK_TIME needs sessions; DATASET=random asks
    RANDOM_OUTPUT_LEN tokens; --sweep alone is auto."""
    assert bench_config(knobs(rate=4, max_in_flight=2), "m").max_in_flight == 2
    assert bench_config(knobs(rate=4, concurrency=2), "m").max_in_flight is None
    with pytest.raises(ValidationError, match="MAX_IN_FLIGHT"):
        knobs(max_in_flight=2)
    capped = knobs(sweep="rate:1,2", max_in_flight=3)
    assert [plan.max_in_flight for _, plan in planned_points(capped, bench_config(capped, "m"))] == [3, 3]
    with pytest.raises(ValidationError, match="RATE_END"):
        knobs(rate_end=8)
    assert bench_config(knobs(rate=1, session_turns=3), "m").session_turns == 3
    with pytest.raises(ValidationError, match="THINK_TIME=exponential:2s pauses between the turns"):
        knobs(think_time="exponential:2s")
    with pytest.raises(ValidationError, match="SESSION_FOLLOWUPS=drawn says where"):
        knobs(session_followups="drawn")
    assert bench_config(knobs(session_turns=2, session_followups="drawn"), "m").session_followups == "drawn"
    assert bench_config(knobs(session_turns=2), "m").session_followups is None  # auto: resolved on the dataset
    with pytest.raises(ValidationError, match="SESSION_TURNS"):
        knobs(sweep="auto", session_turns=3)
    assert knobs(sweep="concurrency:1,2", session_turns=3).session_turns == 3
    random = bench_config(knobs(dataset="random", random_input_len=64, random_output_len=7), "m")
    assert (random.dataset, random.input_len_tokens, random.max_tokens, random.output_len_mean) == ("random", 64, 7,
                                                                                                    None)
    parser = build_parser("bench", "")
    assert settings_from(parser.parse_args(["--sweep"])).sweep == "auto"
    assert settings_from(parser.parse_args(["--sweep", "rate:1,2"])).sweep_spec == ("rate", [1.0, 2.0])


def test_sequential_sampler_sends_each_prompt_once_per_cycle() -> None:
    """The random dataset's order: every prompt once before any repeats, in a seeded order."""
    prompts = [Prompt(str(i), "t", [{"role": "user", "content": f"p{i}"}]) for i in range(5)]
    sampler = WorkloadSampler(prompts, 1, fixed_max_tokens=4, sequential=True)
    first = [sampler.next().prompt.prompt_id for _ in range(5)]
    assert sorted(first) == ["0", "1", "2", "3", "4"] and first != ["0", "1", "2", "3", "4"]
    assert [sampler.next().prompt.prompt_id for _ in range(5)] == first


