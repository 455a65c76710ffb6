"""The end of every benchmark, a run or a series: print the summary, mark ``--baseline``, judge the result, write the
CI files and choose the exit code (the README's "Exit codes").

The CI files: JUnit XML (``--junit FILE``; a regression is a ``<failure>``, a gate that could not judge an
``<error>``; layout of ``tests/fixtures/junit.xsd``) and a Markdown step summary (``--summary FILE``, else
``$GITHUB_STEP_SUMMARY``)."""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

from junit_xml import TestCase, TestSuite, to_xml_report_string

from core.fingerprint import unusable_reason
from core.gate import GateCheck, GateVerdict, gate_verdict
from core.report_schema import Report
from core.series_stats import SeriesReport, series_unusable_reason
from core.settings import Settings
from loadgen.errors import BenchError
from loadgen.sidecar_client import SidecarClient
from loadgen.terminal.summary import format_summary, moved_text, series_lines

EXIT_OK = 0
EXIT_FAILED = 1  # the report could not be written (sidecar unreachable or refusing); rows are kept
EXIT_USAGE = 2  # bad input, services down, unknown or incomparable GATE baseline (nothing was measured)
EXIT_GATE = 3  # GATE: a regression against the named baseline
EXIT_NO_SUCCESS = 4  # no measured request succeeded (report written, never a reference), or every warmup request failed
EXIT_ERROR_RATE = 5  # error rate above MAX_ERROR_RATE_PCT
EXIT_SERVER_DOWN = 6  # vLLM stopped answering mid-run: ended early, the report of the rows so far is written
EXIT_INTERRUPTED = 130  # Ctrl-C, SIGTERM, SIGHUP (the report of the rows so far is written when there are any)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

Result = Report | SeriesReport


def verdicts(settings: Settings, result: Result, gate: GateVerdict | None = None) -> list[tuple[int, str]]:
    """``(exit code, line)`` of every check failed, most serious first: no success, the ``gate`` (its line printed
    when it passes), the error-rate limit (a run's, or each series point's mean)."""
    out: list[tuple[int, str]] = []
    if isinstance(result, Report):
        m = result.metrics
        rates = [("Error rate", m.error_rate_percent)]
        cut = f", {m.requests_incomplete} cut by the run's end" if m.requests_incomplete else ""
        why = f" ({m.requests_failed} failed{cut}): see errors" + (" and the cut requests." if cut else ".")
        succeeded = m.requests_ok > 0
    else:
        rates = [
            (f"{p.label}: error rate", errors.mean if (errors := p.metrics.get("error_rate_percent")) else None)
            for p in result.points
        ]
        why = " at any point of the series."
        throughputs = [p.metrics.get("throughput_req_per_sec") for p in result.points]
        succeeded = any(t is not None and t.mean > 0 for t in throughputs)
    if not succeeded:
        out.append((EXIT_NO_SUCCESS, f"[ERROR] No measured request succeeded{why}"))
    if gate is not None:  # 3 on a regression, 2 when the baseline is unknown/incomparable
        if gate.exit_code:
            out.append((gate.exit_code, gate.line))
        else:
            print(gate.line)
    limit = settings.max_error_rate_pct
    for what, rate in rates:
        if limit is not None and rate is not None and rate > limit:
            out.append((EXIT_ERROR_RATE, f"[ERROR] {what} {rate:.1f}% is above MAX_ERROR_RATE_PCT={limit:g}%"))
    return out


def mark_baseline(sidecar: SidecarClient, name: str, result: Result) -> str:
    """``--baseline NAME``: mark the result as baseline ``name`` unless it could never judge another; the line to
    print (an error is a warning, never the run's failure)."""
    try:
        unusable = unusable_reason(result) if isinstance(result, Report) else series_unusable_reason(result)
        if unusable:
            return f"[WARN] baseline {name} not marked: {unusable}; it could not judge any later run"
        if isinstance(result, Report):
            new_id, previous = result.report_id, sidecar.mark_baseline(name, result.report_id).previous_id
        else:
            new_id, previous = result.series_id, sidecar.mark_series_baseline(name, result.series_id)
    except BenchError as exc:
        return f"[WARN] baseline {name} not marked: {exc}"
    moved = moved_text(name, previous, new_id)
    return f"[BASELINE] {name} -> {new_id}" + (f"\n{moved}" if moved else "")


def finish(
    settings: Settings, sidecar: SidecarClient, result: Result, path: str, interrupted: bool, server_down: str | None
) -> int:
    """Print the summary (a run's two closing lines last), mark the baseline, judge, write CI files; the exit code."""
    lines = format_summary(result, path) if isinstance(result, Report) else series_lines(result, path)
    closing = 2 if isinstance(result, Report) else 0
    for line in lines[: len(lines) - closing]:
        print(line)
    if settings.baseline:
        print(mark_baseline(sidecar, settings.baseline, result))
    for line in lines[len(lines) - closing :]:
        print(line)
    if interrupted:
        if isinstance(result, Report):
            sent = result.metrics.requests_total + result.metrics.requests_incomplete
            what = f"report of the {sent} requests" if sent else "report of the warmup"
        else:
            what = f"series of the {len(result.points)} point(s) measured"
        print(f"[INFO] Interrupted: {what} so far written.")
        return EXIT_INTERRUPTED
    gate = None
    if settings.gate:
        gate = gate_verdict(result, settings.gate, settings.gate_threshold_pct, settings.gate_error_rate_pp)
    down = f"[ERROR] {server_down}; the run was ended early, report written with the failures counted"
    failed = [(EXIT_SERVER_DOWN, down)] if server_down else verdicts(settings, result, gate)
    for _, line in failed:
        print(line, file=sys.stderr)
    for line in write_ci_outputs(settings, ci_result(result, path, failed, gate)):
        print(line)
    return failed[0][0] if failed else EXIT_OK


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
    suite = TestSuite("benchmark-gate", cases, properties=properties)
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
