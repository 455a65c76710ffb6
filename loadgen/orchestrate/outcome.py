"""The end of every benchmark, a run or a series: print the summary, mark ``--baseline``, judge the result, write the
CI files and choose the exit code (the README's "Exit codes")."""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass

from core.fingerprint import unusable_reason
from core.gate import GateVerdict, gate_verdict
from core.report_schema import Report
from core.series_stats import SeriesReport, series_unusable_reason
from core.settings import Settings
from loadgen.errors import BenchError
from loadgen.orchestrate.cioutput import ci_result, write_ci_outputs
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


@dataclass(frozen=True)
class PointOutcome:
    """What the verdicts read of one point (``label`` "" for a single run; ``failed`` None for a series point)."""

    label: str
    succeeded: bool
    error_rate_pct: float | None
    failed: int | None = None
    cut: int = 0  # requests the run's end cut (a single run)


def point_outcomes(result: Result) -> list[PointOutcome]:
    """A report as one unlabelled point, a series as its points."""
    if isinstance(result, Report):
        m = result.metrics
        return [PointOutcome("", m.requests_ok > 0, m.error_rate_percent, m.requests_failed, m.requests_incomplete)]
    outcomes = []
    for point in result.points:
        rate, errors = point.metrics.get("throughput_req_per_sec"), point.metrics.get("error_rate_percent")
        outcomes.append(PointOutcome(point.label, rate is not None and rate.mean > 0,
                                     errors.mean if errors else None))  # fmt: skip
    return outcomes


def judge_gate(settings: Settings, result: Result) -> GateVerdict | None:
    """The gate's verdict on ``result`` against ``GATE`` (None without one)."""
    if not settings.gate:
        return None
    return gate_verdict(result, settings.gate, settings.gate_threshold_pct, settings.gate_error_rate_pp)


def verdicts(settings: Settings, result: Result, gate: GateVerdict | None = None) -> list[tuple[int, str]]:
    """``(exit code, line)`` of every check failed, most serious first: no success, the ``gate`` (its line printed
    when it passes), the error-rate limit per point."""
    points = point_outcomes(result)
    out: list[tuple[int, str]] = []
    if not any(p.succeeded for p in points):
        single = points[0] if len(points) == 1 and not points[0].label else None
        why = " at any point of the series."
        if single is not None:
            cut = f", {single.cut} cut by the run's end" if single.cut else ""
            why = f" ({single.failed} failed{cut}): see errors" + (" and the cut requests." if cut else ".")
        out.append((EXIT_NO_SUCCESS, f"[ERROR] No measured request succeeded{why}"))
    if gate is not None:  # 3 on a regression, 2 when the baseline is unknown/incomparable
        if gate.exit_code:
            out.append((gate.exit_code, gate.line))
        else:
            print(gate.line)
    limit = settings.max_error_rate_pct
    for p in points:
        if limit is not None and p.error_rate_pct is not None and p.error_rate_pct > limit:
            what = f"{p.label}: error rate" if p.label else "Error rate"
            line = f"[ERROR] {what} {p.error_rate_pct:.1f}% is above MAX_ERROR_RATE_PCT={limit:g}%"
            out.append((EXIT_ERROR_RATE, line))
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
    gate = judge_gate(settings, result)
    down = f"[ERROR] {server_down}; the run was ended early, report written with the failures counted"
    failed = [(EXIT_SERVER_DOWN, down)] if server_down else verdicts(settings, result, gate)
    for _, line in failed:
        print(line, file=sys.stderr)
    for line in write_ci_outputs(settings, ci_result(result, path, failed, gate)):
        print(line)
    return failed[0][0] if failed else EXIT_OK
