"""The regression gate (``make benchmark GATE=…``) and the terminal's ``[COMPARE]`` lines."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from core.api import BuildReportRequest
from core.gate import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, comparison_checks, gate_verdict
from core.intervals import Comparison
from core.records import RequestRecord
from core.report_schema import BenchmarkConfig
from core.stats import run_metrics
from loadgen.terminal.summary import compare_lines, format_summary
from sidecar.reports.writer import ReportService
from sidecar.sampling.gpu import NvmlReader
from tests.fakes import FakeNvml
from tests.unit.sidecar.test_sidecar_app import make_settings, write_run
from tests.unit.sidecar.test_sidecar_store import report, single_run

BASE = "benchmark_report_20260101_120000"


def with_changes(name: str, throughput_pct: float | None, p99_pct: float | None):
    changes = {"throughput_req_per_sec": throughput_pct, "e2e_p99_ms": p99_pct}
    return report().model_copy(update={"comparison": {name: single_run(BASE, changes)}})


def gate_failures(throughput_pct: float, p99_pct: float | None, threshold_pct: float) -> list[str]:
    """The failed checks of a single run with these changes."""
    changes = {"throughput_req_per_sec": throughput_pct, "e2e_p99_ms": p99_pct}
    checks = comparison_checks(single_run(BASE, changes), threshold_pct)
    return [f"{c.name} {c.detail}" for c in checks if not c.passed]


def test_equal_run_passes() -> None:
    """No change at all passes the gate."""
    verdict = gate_verdict(with_changes("vs_v0.2.1", 0.0, 0.0), "v0.2.1", 5.0)
    assert verdict.exit_code == EXIT_PASS and verdict.line.startswith("[GATE] PASS vs v0.2.1")


def test_throughput_drop_beyond_threshold_fails_naming_metric_and_size() -> None:
    """A 12.3 % throughput drop fails a 5 % gate, and the line says by how much."""
    verdict = gate_verdict(with_changes("vs_v0.2.1", -12.3, 1.0), "v0.2.1", 5.0)
    assert verdict.exit_code == EXIT_FAIL
    assert verdict.failures == ["throughput_req_per_sec -12.3% (limit -5%)"]
    assert verdict.line.startswith("[GATE] FAIL vs v0.2.1") and "-12.3%" in verdict.line


def test_p99_rise_beyond_threshold_fails() -> None:
    """p99 latency rising 8 % fails a 5 % gate but passes a 10 % one."""
    assert gate_failures(0.0, 8.0, 5.0) == [
        "latency_p99_ms +8.0% (limit +5%)"
    ]
    assert gate_failures(0.0, 8.0, 10.0) == []


def test_improvements_and_changes_within_threshold_pass() -> None:
    """Faster and slightly noisier runs pass; exactly at the threshold passes too."""
    assert gate_failures(30.0, -20.0, 5.0) == []
    assert gate_failures(-5.0, 5.0, 5.0) == []


def test_missing_figure_fails_closed() -> None:
    """A metric that cannot be compared (e.g. no successful request) fails rather than passes."""
    assert gate_failures(1.0, None, 5.0) == [
        "latency_p99_ms n/a: cannot compare (limit +5%)"
    ]


def test_unknown_baseline_is_an_error() -> None:
    """A GATE naming no baseline is exit 2 with a hint how to mark one."""
    verdict = gate_verdict(with_changes("vs_v0.1", 0.0, 0.0), "v0.2.1", 5.0)
    assert verdict.exit_code == EXIT_ERROR and "no baseline named 'v0.2.1'" in verdict.line and "v0.1" in verdict.line
    assert "make baseline NAME=v0.2.1" in verdict.line


def test_incomparable_baseline_is_an_error_with_the_reason() -> None:
    """A baseline of another workload is exit 2, quoting why."""
    refused = report().model_copy(update={"comparison": {"vs_v0.2.1": Comparison(refused="concurrency: 8 -> 50")}})
    verdict = gate_verdict(refused, "v0.2.1", 5.0)
    assert verdict.exit_code == EXIT_ERROR and "concurrency: 8 -> 50" in verdict.line


def _service_body(e2e_ms: float, gap_s: float) -> BuildReportRequest:
    start = time.time() - 2.0
    rows = [
        RequestRecord(request_id=f"r{i}", started_at=start + i * gap_s, ok=True, ttft_ms=10.0, e2e_ms=e2e_ms,
                      output_tokens=8, content_chunks=8)
        for i in range(20)
    ]
    config = BenchmarkConfig(concurrency=2, requests=20, warmup_requests=0, max_tokens=8, temperature=0.0,
                             dataset="d", seed=0, vllm_url="http://x", model="m")
    return BuildReportRequest(
        config=config, run_id=write_run(rows), metrics=run_metrics(rows), window_start=start, window_end=time.time()
    )


def test_gate_end_to_end_through_the_sidecar(tmp_path: Path) -> None:
    """Baseline run, equal run passes, injected regression (slower requests) fails with exit 3."""
    settings = make_settings(tmp_path)
    svc = ReportService.from_settings(settings, gpu=(NvmlReader(FakeNvml()), None), server_facts=lambda url: {})
    svc.build_and_write(_service_body(e2e_ms=100.0, gap_s=0.05))
    svc.mark_baseline("v0.2.1")
    equal = svc.build_and_write(_service_body(e2e_ms=100.0, gap_s=0.05)).report
    assert gate_verdict(equal, "v0.2.1", 5.0).exit_code == EXIT_PASS
    slower = svc.build_and_write(_service_body(e2e_ms=150.0, gap_s=0.075)).report
    verdict = gate_verdict(slower, "v0.2.1", 5.0)
    assert verdict.exit_code == EXIT_FAIL
    assert any(f.startswith("throughput_req_per_sec -") for f in verdict.failures)
    assert any(f.startswith("latency_p99_ms +50.0%") for f in verdict.failures)


def test_compare_lines_read_vs_name_percent_metric() -> None:
    """The terminal prints ``vs_v0.2.1: +12% throughput, …`` for each comparison, then the notes: the first run of
    its workload (no ``vs_previous``), a refused baseline and why."""
    r = with_changes("vs_v0.2.1", 12.04, -3.0)
    r.comparison["vs_old"] = Comparison(refused="workload differs (concurrency: 8 -> 50)")
    lines = compare_lines(r)
    assert lines[0] == "[COMPARE] vs_v0.2.1: +12% throughput, -3.0% p99 latency (benchmark_report_20260101_120000)"
    assert lines[1].startswith("[COMPARE] first run of workload ")
    assert lines[2] == "[COMPARE] vs_old: not compared: workload differs (concurrency: 8 -> 50)"


def test_summary_ends_with_the_seeds_lines_and_names_every_file() -> None:
    """The seed's result lines come first; the report lines name the JSON, Markdown, HTML and CSV beside it; the
    seed's closing lines end it."""
    r = report().model_copy(update={"markdown_file": "x.md", "html_file": "x.html", "csv_file": "x.csv"})
    lines = format_summary(r, "/tmp/reports/x.json")
    assert lines[0].startswith("[RESULT] Avg latency: ") and " | P90: " in lines[0] and " | P99: " in lines[0]
    assert lines[1].startswith("[RESULT] Throughput: ") and " req/s | GPU memory usage: " in lines[1]
    assert lines[-4] == "[REPORT] Baseline saved to /tmp/reports/x.json"
    assert lines[-3] == "[REPORT] Markdown: /tmp/reports/x.md | HTML: /tmp/reports/x.html | CSV: /tmp/reports/x.csv"
    assert lines[-2] == "Benchmark completed. Report generated. Report path: /tmp/reports/x.json"
    assert lines[-1].startswith("Key insight: ")


def test_a_cut_run_never_says_completed() -> None:
    """An interrupted run, or one ended by a dead server, says so where the seed's closing line stands: a script that
    greps ``Benchmark completed`` must not take it for a finished run."""
    cut = format_summary(report().model_copy(update={"interrupted": True}), "/tmp/reports/x.json")
    assert cut[-2] == "Benchmark interrupted. Partial report generated. Report path: /tmp/reports/x.json"
    down = format_summary(report().model_copy(update={"server_down": "connection refused for 5 s"}), "/tmp/r/y.json")
    assert down[-2].startswith("Benchmark ended early: the server stopped answering. Partial report generated.")
    assert not any("Benchmark completed" in line for line in cut + down)


def test_a_run_ended_by_a_model_switch_says_the_model_went_not_the_server() -> None:
    """A switch to another model mid-run ends the run on HTTP 404s from a server that still answers: its closing line
    and its not-a-baseline reason say the run's model went away, never that the server stopped answering."""
    from core.fingerprint import unusable_reason
    from loadgen.orchestrate.locust_run import MODEL_GONE, ServerDown

    line = ServerDown(since=0.0, cause=MODEL_GONE, for_s=5.0).line()
    gone = report().model_copy(update={"server_down": line})
    closing = format_summary(gone, "/tmp/r/z.json")[-2]
    assert closing.startswith("Benchmark ended early: vLLM stopped serving the run's model (the stack was switched")
    assert "switched to another model" in (unusable_reason(gone) or "")
    assert not any("stopped answering" in text for text in (closing, unusable_reason(gone) or ""))


@pytest.mark.parametrize(("value", "text"), [(12.04, "+12%"), (-3.04, "-3.0%"), (0.0, "+0.0%"), (-100.0, "-100%")])
def test_percent_text(value: float, text: str) -> None:
    """Whole percents from 10 % up, one decimal below."""
    from core.units import pct

    assert pct(value) == text


def test_gate_fails_when_the_error_rate_rose() -> None:
    """Same throughput and latency but 50 points more errors is a regression (error rate judged in points)."""
    changes: dict[str, float | None] = {"throughput_req_per_sec": 0.0, "e2e_p99_ms": 0.0}
    comparison = {"vs_v1": single_run(BASE, changes, error_rates=(0.0, 50.0))}
    verdict = gate_verdict(report().model_copy(update={"comparison": comparison}), "v1", 5.0, 1.0)
    assert verdict.exit_code == EXIT_FAIL and "error_rate_percent +50.0 pp (limit +1 pp)" in verdict.line
    small = {"vs_v1": single_run(BASE, changes, error_rates=(0.0, 0.5))}
    assert gate_verdict(report().model_copy(update={"comparison": small}), "v1", 5.0, 1.0).exit_code == EXIT_PASS


def test_a_baseline_without_success_cannot_judge_and_is_never_previous() -> None:
    """A 100 %-failed report is refused as a baseline (exit 2) and skipped as the previous run."""
    from core.comparison import compare_with_history

    failed = report("benchmark_report_20260101_110000")
    failed = failed.model_copy(update={"metrics": failed.metrics.model_copy(update={"requests_ok": 0})})
    good_old = report("benchmark_report_20260101_100000")
    new = report("benchmark_report_20260101_120000")
    comparison = compare_with_history(new, [good_old, failed], {"v1": failed}, 5.0)
    assert comparison["vs_previous"].against == good_old.report_id
    assert "cannot judge" in (comparison["vs_v1"].refused or "")
    verdict = gate_verdict(new.model_copy(update={"comparison": comparison}), "v1", 5.0)
    assert verdict.exit_code == EXIT_ERROR and "cannot judge" in verdict.line


def test_a_profiled_run_is_no_baseline_and_its_pages_say_so() -> None:
    """PROFILE=1 runs the window under vLLM's torch profiler, which slows the engine: the report says it was profiled
    (terminal, Markdown, HTML) and is never a reference (a fresh user found a profiled run saved as the baseline)."""
    from core.fingerprint import unusable_reason
    from sidecar.render.page_sections import report_sections
    from sidecar.render.pages import write_html, write_markdown

    r = report()
    profiled = r.model_copy(update={"config": r.config.model_copy(update={"profiled": True})})
    assert unusable_reason(r) is None
    why = unusable_reason(profiled) or ""
    assert "was profiled (PROFILE=1" in why
    assert "profiled" in write_markdown(report_sections(profiled, [])) and "profiled" in write_html(report_sections(profiled, []))
    assert any("not a baseline" in line and "profiled" in line for line in format_summary(profiled, "/r/p.json"))


def test_a_client_limited_run_says_so_in_its_pages_as_in_the_terminal() -> None:
    """The terminal's `[WARN] Client-limited run: …` was in no page (a fresh user found it only in the JSON): the
    Markdown and HTML reports carry it at the top with its reason."""
    from core.clientview import client_view
    from sidecar.render.page_sections import report_sections
    from sidecar.render.pages import write_html, write_markdown
    from tests.unit.loadgen.test_client_load import ROWS

    limited = report().model_copy(update={"client": client_view(ROWS, duration_s=10.0, cpu_cores=0.95,
                                                                calibration=None)})  # fmt: skip
    assert limited.client is not None and limited.client.client_limited
    for page in (write_markdown(report_sections(limited, [])), write_html(report_sections(limited, []))):
        assert "Client-limited run: " in page and "CPU" in page
    assert "Client-limited run" not in write_markdown(report_sections(report(), []))


def test_a_gate_across_a_warm_and_a_cold_prefix_cache_cannot_judge() -> None:
    """A fresh user's gate passed +45 % throughput against a baseline measured on a cold prefix cache (0 % then, 81 %
    now) right after the comparison had warned of it: the verdict is "cannot judge" (exit 2), naming both rates and
    what to do, in either direction."""
    from core.comparison import compare_reports
    from core.serverview import ServerView

    def served(rate: float, throughput: float) -> object:
        r = report(throughput=throughput)
        return r.model_copy(update={"server": ServerView.model_construct(prefix_cache_hit_rate_percent=rate)})

    for then, now in ((0.0, 81.0), (81.0, 0.0)):
        comparison = compare_reports(served(now, 2.9), served(then, 2.0), 5.0)  # type: ignore[arg-type]
        assert comparison.prefix_cache_percent == (then, now)
        verdict = gate_verdict(report().model_copy(update={"comparison": {"vs_b1": comparison}}), "b1", 5.0)
        assert verdict.exit_code == EXIT_ERROR and "cannot judge: vLLM's prefix cache served" in verdict.line
        assert f"{then:.0f}% of the prompt tokens then and {now:.0f}% now" in verdict.line and "restart vLLM" in verdict.line
    near = compare_reports(served(30.0, 2.0), served(20.0, 2.0), 5.0)  # type: ignore[arg-type]
    assert near.prefix_cache_percent is None
    # a series is judged by the same test, on its paired points (the widest gap), and says so in its notes
    from core.comparison import compare_points, prefix_cache_notes
    from core.series_stats import report_as_point

    points = compare_points([report_as_point(served(81.0, 2.9), "c=2")],  # type: ignore[arg-type]
                            [report_as_point(served(0.0, 2.0), "c=2")], "s1", 5.0)  # type: ignore[arg-type]
    assert points.prefix_cache_percent == (0.0, 81.0) and "0% of the prompt tokens then" in prefix_cache_notes(points)[0]
