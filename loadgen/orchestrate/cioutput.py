"""The benchmark's CI files: JUnit XML (``--junit FILE``; a regression is a ``<failure>``, a gate that could not
judge an ``<error>``; layout of ``tests/fixtures/junit.xsd``) and a Markdown step summary (``--summary FILE``, else
``$GITHUB_STEP_SUMMARY``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from junit_xml import TestCase, TestSuite, to_xml_report_string

from core.gate import GateCheck, GateVerdict
from core.report_schema import Report
from core.series_stats import SeriesReport
from core.settings import Settings

SUITE = "benchmark-gate"


@dataclass(frozen=True)
class CiResult:
    """What a CI step reports: ``title`` (report or series id), the gate's verdict (None without GATE), the run's
    own failed checks ``(exit code, line)``, headline ``figures`` (name -> text) and the report's path."""

    title: str
    gate: GateVerdict | None
    run_failures: list[tuple[int, str]] = field(default_factory=list)
    figures: dict[str, str] = field(default_factory=dict)
    report_path: str = ""

    @property
    def exit_code(self) -> int:
        """The worst exit code: the run's failures, then the gate's (0: passed)."""
        codes = [code for code, _ in self.run_failures] + ([self.gate.exit_code] if self.gate else [])
        return next((code for code in codes if code), 0)


def _case(check: GateCheck, classname: str) -> TestCase:
    case = TestCase(check.name, classname=classname, elapsed_sec=0.0, stdout=check.detail)
    if check.error:
        case.add_error_info(message=check.detail, error_type="cannot_judge")
    elif not check.passed:
        case.add_failure_info(message=check.detail, failure_type="regression")
    return case


def junit_xml_text(result: CiResult) -> str:
    """The JUnit XML of ``result``: suite ``benchmark-gate``, the gate's checks (class ``gate.vs_<baseline>``) and
    the run's own (class ``run``); properties: title, report path, figures."""
    cases: list[TestCase] = []
    if result.gate is not None:
        classname = f"gate.vs_{result.gate.baseline}"
        cases += [_case(check, classname) for check in result.gate.checks]
    if not result.run_failures:
        cases.append(_case(GateCheck("run_checks", True, "some request succeeded; error rate within its limit"), "run"))
    for code, line in result.run_failures:
        cases.append(_case(GateCheck(f"run_check_exit_{code}", False, line), "run"))
    properties = {"title": result.title, "report": result.report_path, **result.figures}
    suite = TestSuite(SUITE, cases, properties=properties)
    return to_xml_report_string([suite], prettyprint=True, encoding="utf-8")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_summary(result: CiResult) -> str:
    """The Markdown step summary: the outcome, the figures, a row per gate check, the failed checks, the report."""
    outcome = "PASS" if result.exit_code == 0 else ("ERROR" if result.exit_code == 2 else "FAIL")
    lines = [f"## Benchmark {outcome}: {result.title}", ""]
    if result.figures:
        lines += ["| figure | value |", "|---|---|"]
        lines += [f"| {_cell(name)} | {_cell(value)} |" for name, value in result.figures.items()]
        lines.append("")
    if result.gate is None:
        lines.append("No gate: set `GATE=<baseline>` to judge this run against a stored baseline.")
    else:
        lines += [f"**Gate vs `{result.gate.baseline}`:** {_cell(result.gate.line)}", ""]
        lines += ["| metric | result | change |", "|---|---|---|"]
        for check in result.gate.checks:
            mark = "error" if check.error else ("pass" if check.passed else "**FAIL**")
            lines.append(f"| {_cell(check.name)} | {mark} | {_cell(check.detail)} |")
    lines.append("")
    lines += [f"- {_cell(line)}" for _, line in result.run_failures]
    if result.report_path:
        lines.append(f"Report: `{result.report_path}`")
    return "\n".join(lines).rstrip() + "\n"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} ms"


def ci_result(
    result: Report | SeriesReport, path: str, failed: list[tuple[int, str]], gate: GateVerdict | None
) -> CiResult:
    """The CI view of a run or a series: the ``gate`` verdict, the ``failed`` verdicts but the gate's, its figures."""
    runs = [(code, line) for code, line in failed if not line.startswith("[GATE]")]
    if isinstance(result, Report):
        return CiResult(result.report_id, gate, runs, report_figures(result), path)
    return CiResult(result.series_id, gate, runs, series_figures(result), path)


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
        rate, p99 = point.metrics.get("throughput_req_per_sec"), point.metrics.get("e2e_p99_ms")
        p99_text = f", E2E p99 {p99.mean:.1f} ms" if p99 else ""
        figures[point.label] = (f"{rate.mean:.2f} req/s" if rate else "n/a") + p99_text
    return figures


def write_ci_outputs(settings: Settings, result: CiResult) -> list[str]:
    """Write JUNIT_FILE and the step summary (SUMMARY_FILE, overwritten; else appended to GITHUB_STEP_SUMMARY); the
    lines to print (a file that cannot be written is a warning, never an exit code)."""
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
