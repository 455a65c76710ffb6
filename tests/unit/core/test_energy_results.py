"""Energy and cost through the results: the comparison, the gate (a J/token regression fails like a throughput one),
the sweep's points and knee, `make compare` and the history."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.comparison import Side, compare_points, compare_sides, compare_with_history
from core.gate import EXIT_FAIL, EXIT_PASS, comparison_checks, gate_verdict, history_table, timelines
from core.report_schema import Environment, Report, Resources
from core.series_stats import PointPlan, SeriesPoint, SeriesReport, find_knee, measure_point
from sidecar.render.page_sections import report_sections, series_sections
from sidecar.render.pages import write_markdown
from tests.unit.sidecar.test_sidecar_store import report, single_run

FIGURES = ("energy_j_per_output_token", "cost_usd_per_1m_output_tokens")


def measured(report_id: str, j_per_token: float | None, usd: float | None = None, ended: float = 1.0) -> Report:
    """A report whose energy per output token and cost per million output tokens are given (None: not measured)."""
    base = report(report_id, ended=ended)
    metrics = base.metrics.model_copy(update={
        "energy_j_per_output_token": j_per_token, "output_tokens_per_j": 1 / j_per_token if j_per_token else None,
        "energy_j": None if j_per_token is None else j_per_token * base.metrics.output_tokens_total,
        "cost_usd_per_1m_output_tokens": usd,
    })  # fmt: skip
    return base.model_copy(update={"metrics": metrics})


def judged(old: Report, new: Report) -> Report:
    """``new`` with the sidecar's comparison against baseline ``v1`` = ``old``."""
    comparison = compare_with_history(new, [], {"v1": old}, 5.0)
    return new.model_copy(update={"comparison": comparison})


def test_a_j_per_token_rise_beyond_the_threshold_fails_the_gate() -> None:
    """0.40 -> 0.44 J per output token (+10 %) fails a 5 % gate naming the figure; +4 % passes; so does a drop."""
    old = measured("benchmark_report_20260101_120000", 0.40)
    worse = judged(old, measured("benchmark_report_20260102_120000", 0.44))
    assert worse.comparison["vs_v1"].points[0].changes["energy_j_per_output_token"].change_pct == pytest.approx(10.0)
    verdict = gate_verdict(worse, "v1", 5.0)
    assert verdict.exit_code == EXIT_FAIL and verdict.failures == ["energy_j_per_output_token +10.0% (limit +5%)"]
    assert gate_verdict(judged(old, measured("benchmark_report_20260102_120000", 0.416)), "v1", 5.0).exit_code == (
        EXIT_PASS)
    assert gate_verdict(judged(old, measured("benchmark_report_20260102_120000", 0.2)), "v1", 5.0).exit_code == (
        EXIT_PASS)


def test_energy_is_gated_only_where_both_runs_measured_it() -> None:
    """A run without energy (no NVML, no RAPL) against one with it, or two without: no energy check, no failure;
    throughput and p99 are gated as before."""
    with_energy = measured("benchmark_report_20260101_120000", 0.40)
    without = measured("benchmark_report_20260102_120000", None)
    for verdict in (gate_verdict(judged(with_energy, without), "v1", 5.0),
                    gate_verdict(judged(without, without), "v1", 5.0)):  # fmt: skip
        assert verdict.exit_code == EXIT_PASS
        assert [c.name for c in verdict.checks] == ["error_rate_percent", "throughput_req_per_sec", "latency_p99_ms"]
    checks = comparison_checks(single_run("r", {"throughput_req_per_sec": 0.0, "e2e_p99_ms": 0.0,
                                                "energy_j_per_output_token": 6.0}), 5.0)  # fmt: skip
    assert [f"{c.name} {c.detail}" for c in checks if not c.passed] == ["energy_j_per_output_token +6.0% (limit +5%)"]


def test_a_series_point_whose_j_per_token_rose_beyond_its_interval_fails() -> None:
    """Repeated runs: J/token 0.40 ± noise against 0.50 ± noise is a regression of the point, named with its label."""

    def point(values: list[float], tag: str) -> SeriesPoint:
        runs = [measured(f"benchmark_report_2026010{tag}_12000{i}", v) for i, v in enumerate(values)]
        return measure_point(PointPlan(label="concurrency 8", kind="concurrency"), runs, {}, 95.0)

    new = [point([0.50, 0.51, 0.49], "2")]
    comparison = compare_points(new, [point([0.40, 0.41, 0.39], "1")], "benchmark_series_20260101_120000", 5.0)
    series = SeriesReport(series_id="benchmark_series_20260102_120000", timestamp="t", repeat=3, config=report().config,
                          environment=Environment(), slo_attainment_pct=95.0, points=new,
                          knee=find_knee(new, {}, 95.0), comparison={"vs_v1": comparison})
    verdict = gate_verdict(series, "v1", 5.0)
    assert verdict.exit_code == EXIT_FAIL
    assert any(f.startswith("concurrency 8: energy_j_per_output_token") for f in verdict.failures)


def test_sweep_points_and_knee_carry_j_per_token_and_cost() -> None:
    """Every point has J/token and USD per million output tokens (means over runs), the table shows them, and the knee
    line quotes them."""
    runs = [measured("benchmark_report_20260101_120000", 0.40, 1.50), measured("benchmark_report_20260101_120001",
                                                                              0.44, 1.70)]  # fmt: skip
    point = measure_point(PointPlan(label="concurrency 8", kind="concurrency"), runs, {}, 95.0)
    assert point.metrics["energy_j_per_output_token"].mean == pytest.approx(0.42)
    assert point.metrics["cost_usd_per_1m_output_tokens"].mean == pytest.approx(1.6)
    slo = {"ttft_ms": 500.0}
    point = point.model_copy(update={"meets_slo": True})
    knee = find_knee([point], slo, 95.0)
    assert "0.42 J/output token (±" in knee.line and "$1.6/1M output tokens (±" in knee.line
    series = SeriesReport(series_id="benchmark_series_20260102_120000", timestamp="t", repeat=2, config=report().config,
                          environment=Environment(), slo_attainment_pct=95.0, points=[point], knee=knee)
    text = write_markdown(series_sections(series))
    assert "energy / output token (J)" in text and "cost / 1M output tokens (USD)" in text and "0.42 ± 0.25" in text


def test_make_compare_shows_energy_and_cost_changes() -> None:
    """B against A: J/token and USD per million output tokens are compared beside throughput."""
    a, b = measured("benchmark_report_20260101_120000", 0.40, 2.0), measured("benchmark_report_20260102_120000",
                                                                             0.30, 1.5)  # fmt: skip
    from core.series_stats import report_as_point

    def side(r: Report) -> Side:
        return Side(ref=r.report_id, kind="report", id=r.report_id, environment=r.environment, config=r.config,
                    points=[report_as_point(r)])  # fmt: skip

    result = compare_sides(side(a), side(b), "benchmark_compare_20260102_120000", "t", 5.0)
    (pair,) = result.points
    assert pair.changes["energy_j_per_output_token"].change_pct == pytest.approx(-25.0)
    assert pair.changes["cost_usd_per_1m_output_tokens"].change_pct == pytest.approx(-25.0)


def test_history_shows_j_per_token_and_cost_columns_where_runs_have_them() -> None:
    """The history table gains J/tok and $/1M out columns for a workload whose runs have them; others keep theirs."""
    runs = [measured("benchmark_report_20260101_120000", 0.40, 2.0, ended=1.0),
            measured("benchmark_report_20260102_120000", None, None, ended=2.0)]  # fmt: skip
    runs = [r.model_copy(update={"fingerprint": "f1"}) for r in runs]
    lines = history_table(timelines(runs, {}))
    assert "J/tok" in lines[1] and "$/1M out" in lines[1]
    assert "  0.400     2.00" in lines[2] and "    n/a      n/a" in lines[3]
    plain = [report("benchmark_report_20260103_120000").model_copy(update={"fingerprint": "f"})]
    assert "J/tok" not in history_table(timelines(plain, {}))[1]


def test_stored_reports_without_energy_render_as_before(tmp_path: Path) -> None:
    """A report written before energy existed (no resources.energy) shows no energy or cost row."""
    old = report().model_copy(update={"resources": Resources()})
    text = write_markdown(report_sections(old, []))
    assert "Energy" not in text and "Cost" not in text
