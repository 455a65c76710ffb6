"""The benchmark's CI files: JUnit XML (``--junit FILE``) and a Markdown step summary (``--summary FILE``, else
GitHub's ``$GITHUB_STEP_SUMMARY``), written after the report from the gate's verdict (:mod:`core.ciout`)."""

from __future__ import annotations

from pathlib import Path

from core.ciout import CiResult, junit_xml_text, markdown_summary
from core.gate import gate_verdict
from core.report_schema import Report
from core.series import SeriesReport
from core.settings import Settings


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} ms"


def ci_result(
    settings: Settings, result: Report | SeriesReport, path: str, failed: list[tuple[int, str]]
) -> CiResult:
    """The CI view of a run or a series: its gate verdict (``GATE``; a series' point by point), its other failed
    checks (from ``failed``, the benchmark's verdicts, the gate's own line left out) and its headline figures."""
    gate = (
        gate_verdict(result, settings.gate, settings.gate_threshold_pct, settings.gate_error_rate_pp)
        if settings.gate
        else None
    )
    if isinstance(result, Report):
        return CiResult(result.report_id, gate, _run_failures(failed), report_figures(result), path)
    return CiResult(result.series_id, gate, _run_failures(failed), series_figures(result), path)


def report_figures(report: Report) -> dict[str, str]:
    """One run's headline figures: throughput, TTFT and E2E p50/p99, error rate, GPU memory peak."""
    m = report.metrics
    return {
        "throughput": f"{m.throughput_req_per_sec:.2f} req/s, {m.output_tokens_per_sec:.1f} output tok/s",
        "TTFT p50 / p99": f"{_ms(m.ttft.p50_ms)} / {_ms(m.ttft.p99_ms)}",
        "E2E p50 / p99": f"{_ms(m.e2e.p50_ms)} / {_ms(m.e2e.p99_ms)}",
        "error rate": "n/a (no measured request ended)"
        if m.error_rate_percent is None
        else f"{m.error_rate_percent:.1f} % of {m.requests_total}",
        "GPU memory peak": "n/a" if m.gpu_mem_peak_gb is None else f"{m.gpu_mem_peak_gb:.2f} GiB",
    }


def series_figures(series: SeriesReport) -> dict[str, str]:
    """Each point's mean throughput and E2E p99."""
    figures = {}
    for point in series.points:
        rate = point.metrics.get("throughput_req_per_sec")
        p99 = point.metrics.get("e2e_p99_ms")
        figures[point.label] = (f"{rate.mean:.2f} req/s" if rate else "n/a") + (
            f", E2E p99 {p99.mean:.1f} ms" if p99 else ""
        )
    return figures


def _run_failures(failed: list[tuple[int, str]]) -> list[tuple[int, str]]:
    return [(code, line) for code, line in failed if not line.startswith("[GATE]")]


def write_ci_outputs(settings: Settings, result: CiResult) -> list[str]:
    """Write the JUnit file (``JUNIT_FILE``) and the step summary (``SUMMARY_FILE``, overwritten; else appended to
    ``GITHUB_STEP_SUMMARY`` as GitHub expects); returns the lines to print (one per file, or a warning: a file that
    cannot be written never changes the run's exit code)."""
    lines = []
    targets: list[tuple[Path, str, str]] = []
    if settings.junit_file:
        targets.append((settings.junit_file, junit_xml_text(result), "w"))
    summary = settings.summary_file or settings.github_step_summary
    if summary:
        targets.append((summary, markdown_summary(result), "w" if settings.summary_file else "a"))
    for path, text, mode in targets:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open(mode, encoding="utf-8") as out:
                out.write(text)
            lines.append(f"[CI] {'JUnit' if text.startswith('<?xml') else 'Summary'}: {path}")
        except OSError as exc:
            lines.append(f"[WARN] {path} not written: {exc.strerror or exc}; set JUNIT_FILE/SUMMARY_FILE to a "
                         "writable path")  # fmt: skip
    return lines
