"""Series maths (core/series_stats.py): the SLO knee, point metrics over runs, point matching and the series gate."""

from __future__ import annotations

import pytest

from core.comparison import compare_points
from core.gate import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, gate_verdict
from core.intervals import interval
from core.parsing import parse_sweep
from core.report_schema import Environment
from core.series_stats import (
    PointPlan,
    SeriesPoint,
    SeriesReport,
    find_knee,
    measure_point,
    report_as_point,
)
from tests.unit.sidecar.test_sidecar_store import report


def point(label: str, within_pct: float, throughput: float = 1.0, meets: bool | None = None) -> SeriesPoint:
    metrics = {"goodput_percent": interval([within_pct]), "throughput_req_per_sec": interval([throughput])}
    return SeriesPoint(label=label, kind="rate", metrics={k: v for k, v in metrics.items() if v},
                       meets_slo=within_pct >= 95.0 if meets is None else meets)


SLO = {"ttft_ms": 500.0}


def test_knee_is_the_highest_load_point_meeting_the_slo() -> None:
    """Points meet the SLO at 100, 99 and 96 % within it, then fail: the knee is the third, its line names it."""
    points = [point("rate 1", 100), point("rate 2", 99), point("rate 3", 96, 2.9), point("rate 4", 80), point("max", 50)]
    knee = find_knee(points, SLO, 95.0)
    assert knee.index == 2 and knee.label == "rate 3"
    assert knee.line.startswith("Knee (SLO ttft_ms<=500 in >=95% of requests): rate 3: 2.90 req/s")
    assert "next: rate 4 fails it" in knee.line and knee.notes == []


def test_knee_after_a_failing_lower_point_is_the_highest_meeting_one_with_a_note() -> None:
    """A lower point that misses the SLO (noise or a cliff) does not hide a higher one that meets it; it is noted."""
    points = [point("a", 100), point("b", 90), point("c", 97), point("d", 10)]
    knee = find_knee(points, SLO, 95.0)
    assert knee.index == 2 and knee.notes == ["b (below the knee) does not meet the SLO"]


def test_no_knee_without_an_slo_or_when_nothing_meets_it() -> None:
    """Without an SLO the line says how to set one; with nothing meeting it, it says so."""
    assert find_knee([point("a", 100)], {}, 95.0).index is None
    none = find_knee([point("a", 50), point("b", 40)], SLO, 95.0)
    assert none.index is None and "no load point meets the SLO" in none.line


def test_measure_point_averages_runs_and_judges_the_slo_on_the_mean_share() -> None:
    """Three runs: throughput mean and a t interval; meets the SLO when the mean share within it is >= attainment."""
    runs = []
    for i, (value, within) in enumerate(((1.0, 100.0), (1.2, 96.0), (1.1, 92.0))):
        r = report(f"benchmark_report_20260101_12000{i}", throughput=value)
        runs.append(r.model_copy(update={"metrics": r.metrics.model_copy(update={"goodput_percent": within})}))
    measured = measure_point(PointPlan(label="c8", kind="concurrency", concurrency=8), runs, SLO, 95.0)
    tput = measured.metrics["throughput_req_per_sec"]
    assert tput.n == 3 and tput.mean == pytest.approx(1.1)
    assert tput.low is not None and tput.high is not None and tput.low < 1.1 < tput.high
    assert measured.metrics["goodput_percent"].mean == pytest.approx(96.0) and measured.meets_slo is True
    assert measure_point(PointPlan(label="c8", kind="concurrency"), runs, SLO, 97.0).meets_slo is False
    assert measure_point(PointPlan(label="c8", kind="concurrency"), runs, {}, 95.0).meets_slo is None


def test_points_are_compared_by_workload_fingerprint() -> None:
    """A point meets the reference point of its own fingerprint; nothing in common is refused with the reason."""
    old = [report_as_point(report(concurrency=8)), report_as_point(report(concurrency=4))]
    new = [report_as_point(report(concurrency=4, throughput=3.0))]
    comparison = compare_points(new, old, "benchmark_series_20260101_120000", 5.0)
    assert [(p.label, p.against_label) for p in comparison.points] == [("concurrency 4", "concurrency 4")]
    assert comparison.points[0].changes["throughput_req_per_sec"].change_pct == pytest.approx(50.0)
    refused = compare_points([report_as_point(report(concurrency=2))], old, "x", 5.0)
    assert refused.points == [] and refused.refused and "fingerprint" in refused.refused


def series_vs(baseline: list[float], new: list[float]) -> SeriesReport:
    """A one-point series of runs with throughputs ``new`` against a baseline series with ``baseline``."""

    def runs(values: list[float], tag: str) -> SeriesPoint:
        reports = [report(f"benchmark_report_2026010{tag}_12000{i}", throughput=v) for i, v in enumerate(values)]
        return measure_point(PointPlan(label="concurrency 8", kind="concurrency"), reports, {}, 95.0)

    points = [runs(new, "2")]
    comparison = compare_points(points, [runs(baseline, "1")], "benchmark_series_20260101_120000", 5.0)
    return SeriesReport(series_id="benchmark_series_20260102_120000", timestamp="t", repeat=len(new),
                        config=report().config, environment=Environment(), slo_attainment_pct=95.0, points=points,
                        knee=find_knee(points, {}, 95.0), comparison={"vs_v1": comparison})


def test_series_gate_passes_noise_and_fails_a_shift_beyond_the_threshold() -> None:
    """Gate on intervals: the same distribution passes as no significant change; 20 % less throughput fails."""
    same = gate_verdict(series_vs([2.0, 2.2, 1.9, 2.1], [2.15, 1.95, 2.05]), "v1", 5.0)
    assert same.exit_code == EXIT_PASS and "no significant change" in same.line
    worse = gate_verdict(series_vs([2.0, 2.2, 1.9, 2.1], [1.6, 1.65, 1.62]), "v1", 5.0)
    assert worse.exit_code == EXIT_FAIL and "throughput_req_per_sec" in worse.line and "regression" in worse.line
    assert gate_verdict(series_vs([2.0], [2.0]), "other", 5.0).exit_code == EXIT_ERROR


def test_parse_sweep_forms_and_errors() -> None:
    """auto, concurrency and rate lists parse (sorted, each once); bad forms name a valid example."""
    assert parse_sweep("auto") == ("auto", [])
    assert parse_sweep("concurrency:8,1,2,2") == ("concurrency", [1.0, 2.0, 8.0])
    assert parse_sweep("rate:0.5, 2") == ("rate", [0.5, 2.0])
    for bad in ("linear:1,2", "concurrency:1.5", "rate:0", "rate:", "rate:nan", "auto:3"):
        with pytest.raises(ValueError, match="SWEEP"):
            parse_sweep(bad)
