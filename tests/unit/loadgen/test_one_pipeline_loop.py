"""A single run is a series of one point (loadgen/orchestrate/pipeline.py, sweep.py): the series loop measures it
without the series' bar and run line, its report is the result, and a run that stopped before measuring keeps its
exit code; a series whose every run failed says why each did."""

from __future__ import annotations

from typing import Any

import pytest

from core.report_schema import BenchmarkConfig
from core.settings import Settings
from loadgen.orchestrate.outcome import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NO_SUCCESS, EXIT_USAGE
from loadgen.orchestrate.pipeline import RunResult, SeriesRuns, finish_run, report_series, run_series
from loadgen.plan import bench_config
from tests.unit.sidecar.test_sidecar_store import report


def knobs(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_a_single_run_goes_through_the_series_loop_quietly() -> None:
    """No SWEEP, REPEAT=1: one call of the point runner with the plan as given (warmup included), one result, one
    point of one report, and no ``[REPEAT]`` line (the run's summary is its output); REPEAT=2 prints one per run."""
    settings = knobs(requests=4, concurrency=3, warmup=2)
    plans: list[BenchmarkConfig] = []
    lines: list[str] = []

    def run_point(plan: BenchmarkConfig) -> RunResult:
        plans.append(plan)
        return RunResult(report(f"benchmark_report_20260101_12000{len(plans)}"))

    runs = run_series(settings, bench_config(settings, "m"), run_point, out=lines.append)
    assert [(p.concurrency, p.warmup_requests) for p in plans] == [(3, 2)]
    assert len(runs.results) == 1 and [p.report_ids for p in runs.points] == [["benchmark_report_20260101_120001"]]
    assert [p.label for p in runs.points] == ["concurrency 3"] and lines == []
    repeated = run_series(knobs(requests=4, repeat=2, cooldown_s=0), bench_config(settings, "m"), run_point,
                          out=lines.append)  # fmt: skip
    assert len(repeated.results) == 2 and [line.split(":")[0] for line in lines] == [
        "[REPEAT] point 1/1 concurrency 3, run 1/2", "[REPEAT] point 1/1 concurrency 3, run 2/2"]


@pytest.mark.parametrize(
    ("result", "code"),
    [
        (RunResult(None, error="vLLM with profiler did not start", exit_code=EXIT_USAGE), EXIT_USAGE),
        (RunResult(None, error="every warmup request failed", exit_code=EXIT_NO_SUCCESS), EXIT_NO_SUCCESS),
        (RunResult(None, error="no measured request ended", empty=True), EXIT_NO_SUCCESS),
        (RunResult(None, interrupted=True, error="no measured request ended", empty=True), EXIT_INTERRUPTED),
        (RunResult(None, error="sidecar unreachable"), EXIT_FAILED),
    ],
)
def test_a_single_run_without_a_report_says_why_with_its_exit_code(
    result: RunResult, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run's own reason on stderr and the exit code of the README's table; nothing is sent to the sidecar."""
    assert finish_run(knobs(), None, result) == code  # type: ignore[arg-type]
    assert f"[ERROR] {result.error}" in capsys.readouterr().err


def test_a_series_whose_runs_all_failed_names_each_cause(capsys: pytest.CaptureFixture[str]) -> None:
    """Every run refused for its load workers: exit 2 (a setup to mend) and each run's reason printed; a series
    whose runs failed otherwise exits 4."""
    settings = knobs(sweep="concurrency:1,2", duration=5)
    missing = "1 of 2 load worker(s) never joined"
    runs = SeriesRuns(points=[], notes=[f"concurrency {n} run 1: {missing}" for n in (1, 2)],
                      results=[RunResult(None, error=missing, exit_code=EXIT_USAGE)] * 2)  # fmt: skip
    assert report_series(settings, bench_config(settings, "m"), None, runs) == EXIT_USAGE  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert f"[ERROR] concurrency 1 run 1: {missing}" in err and f"[ERROR] concurrency 2 run 1: {missing}" in err
    runs.results = [RunResult(None, error="every warmup request failed", exit_code=EXIT_NO_SUCCESS)] * 2
    assert report_series(settings, bench_config(settings, "m"), None, runs) == EXIT_NO_SUCCESS  # type: ignore[arg-type]


def test_ctrl_c_outside_a_single_runs_window_reaches_the_command() -> None:
    """A Ctrl-C the run did not take (in its warmup, a second one) is the command's to handle ("Interrupted: no
    report written"), as before a single run went through the series loop; a series keeps what it measured."""
    settings = knobs(requests=4)

    def run_point(plan: BenchmarkConfig) -> RunResult:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_series(settings, bench_config(settings, "m"), run_point, out=lambda line: None)
    series = knobs(sweep="concurrency:1,2", duration=5)
    runs = run_series(series, bench_config(series, "m"), run_point, out=lambda line: None)
    assert runs.interrupted and runs.points == [] and "interrupted (Ctrl-C) between runs" in runs.notes
