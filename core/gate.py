"""Regression gate for CI (pure): ``make benchmark GATE=v0.2.1`` fails when the run is worse than the baseline.

The sidecar has already compared the new report with every named baseline of the same workload fingerprint
(``comparison.changes_pct["vs_<name>"]``); the gate only reads those percent changes. A run fails when request
throughput drops, or p99 latency rises, by more than the threshold (default 5 %, GATE_THRESHOLD_PCT), or when its
error rate rises by more than GATE_ERROR_RATE_PP percentage points (default 1). A baseline that cannot be judged
against (no successful request, interrupted) is "cannot judge" (exit 2), never a pass or a regression.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.intervals import change_text
from core.report_schema import Report
from core.series import SeriesReport

EXIT_PASS = 0
EXIT_ERROR = 2  # unknown baseline, or one whose workload differs: the gate cannot judge
EXIT_FAIL = 3

# metric -> direction that is bad: -1 = a drop is a regression, +1 = a rise is.
GATED_METRICS: dict[str, int] = {"throughput_req_per_sec": -1, "latency_p99_ms": +1}


@dataclass(frozen=True)
class GateCheck:
    """One gated metric's outcome (one JUnit test case): ``name`` e.g. ``latency_p99_ms`` (a series prefixes the
    point's label: ``c=8: e2e_p99_ms``), ``detail`` the change and its limit; ``passed`` False is a regression,
    ``error`` True means the gate could not judge (unknown or incomparable baseline, a missing figure)."""

    name: str
    passed: bool
    detail: str
    error: bool = False


@dataclass(frozen=True)
class GateVerdict:
    """What the gate decided; ``line`` is the terminal line, ``failures`` one entry per failed metric, ``checks``
    every gated metric (passed or not), ``baseline`` the name it judged against."""

    exit_code: int
    line: str
    failures: list[str] = field(default_factory=list)
    checks: list[GateCheck] = field(default_factory=list)
    baseline: str = ""


def gate_failures(changes_pct: dict[str, float | None], threshold_pct: float, error_rate_pp: float = 1.0) -> list[str]:
    """Failed metrics, e.g. ``throughput_req_per_sec -12.3% (limit -5%)`` or ``error_rate_percent +50.0 pp (limit
    +1 pp)``; a missing change fails (cannot judge)."""
    return [f"{c.name} {c.detail}" for c in gate_checks(changes_pct, threshold_pct, error_rate_pp) if not c.passed]


def gate_checks(
    changes_pct: dict[str, float | None], threshold_pct: float, error_rate_pp: float = 1.0
) -> list[GateCheck]:
    """Every gated metric of one report's comparison as a :class:`GateCheck` (error rate, throughput, p99): the
    same rules as :func:`gate_failures`, whose entries are the details of the checks that did not pass."""
    checks = []
    rise = changes_pct.get("error_rate_percent_pp")
    limit_pp = f"(limit {error_rate_pp:+g} pp)"
    if rise is not None:
        checks.append(GateCheck("error_rate_percent", rise <= error_rate_pp, f"{rise:+.1f} pp {limit_pp}"))
    for metric, bad_sign in GATED_METRICS.items():
        change = changes_pct.get(f"{metric}_pct")
        limit = f"(limit {bad_sign * threshold_pct:+g}%)"
        if change is None:
            checks.append(GateCheck(metric, False, f"n/a: cannot compare {limit}", error=True))
        else:
            checks.append(GateCheck(metric, change * bad_sign <= threshold_pct, f"{change:+.1f}% {limit}"))
    return checks


def refused_line(baseline: str, reason: str) -> str:
    """``[GATE] ERROR vs v1: not comparable: workload differs …``: the gate's line for a baseline it cannot judge
    against, printed after a run (from the report's comparison) or before one (the benchmark's preflight)."""
    return f"[GATE] ERROR vs {baseline}: not comparable: {reason}"


def gate_verdict(report: Report, baseline: str, threshold_pct: float, error_rate_pp: float = 1.0) -> GateVerdict:
    """Judge ``report`` against the named ``baseline``: exit 0 pass, 3 regression, 2 unknown or incomparable."""
    key = f"vs_{baseline}"
    comparison = report.comparison
    if key in comparison.refused:
        line = refused_line(baseline, comparison.refused[key])
        return GateVerdict(EXIT_ERROR, line, checks=[_cannot_judge(line)], baseline=baseline)
    changes = comparison.changes_pct.get(key)
    if changes is None:
        names = [*comparison.changes_pct, *comparison.refused]
        known = sorted(k.removeprefix("vs_") for k in names if k != "vs_previous")
        hint = f"known: {', '.join(known)}" if known else "none is marked"
        line = (
            f"[GATE] ERROR vs {baseline}: no baseline named {baseline!r} ({hint}); mark one with "
            f"`make baseline NAME={baseline}`"
        )
        return GateVerdict(EXIT_ERROR, line, checks=[_cannot_judge(line)], baseline=baseline)
    checks = gate_checks(changes, threshold_pct, error_rate_pp)
    failures = [f"{c.name} {c.detail}" for c in checks if not c.passed]
    against = comparison.against.get(key, "?")
    if failures:
        line = f"[GATE] FAIL vs {baseline} ({against}): " + "; ".join(failures)
        return GateVerdict(EXIT_FAIL, line, failures, checks, baseline)
    summary = ", ".join(f"{m} {changes.get(f'{m}_pct', 0.0) or 0.0:+.1f}%" for m in GATED_METRICS)
    line = f"[GATE] PASS vs {baseline} ({against}): {summary} (threshold {threshold_pct:g}%)"
    return GateVerdict(EXIT_PASS, line, checks=checks, baseline=baseline)


def _cannot_judge(line: str) -> GateCheck:
    """The one check of a gate that could not judge (the baseline is unknown or not comparable)."""
    return GateCheck("baseline", False, line.removeprefix("[GATE] "), error=True)


# series metric -> direction that is bad, as GATED_METRICS (E2E p99 is the report's latency_p99_ms)
SERIES_GATED: dict[str, int] = {"throughput_req_per_sec": -1, "e2e_p99_ms": +1}


def series_gate_verdict(
    series: SeriesReport, baseline: str, threshold_pct: float, error_rate_pp: float = 1.0
) -> GateVerdict:
    """Judge a series (``REPEAT`` runs, or a sweep) against the named baseline, point by point (same workload).

    With intervals (repeats on either side) a metric fails only when its whole 95 % interval lies beyond the threshold
    (verdict ``regression``); a change inside the noise passes as "no significant change". Without any interval
    (single runs on both sides) the plain percent change is held to the threshold, as :func:`gate_failures` does.
    The error rate fails when its mean rises by more than ``error_rate_pp`` percentage points.
    """
    key = f"vs_{baseline}"
    comparison = series.comparison.get(key)
    if comparison is None:
        line = (
            f"[GATE] ERROR vs {baseline}: no baseline named {baseline!r}; mark one with `make baseline NAME={baseline}`"
        )
        return GateVerdict(EXIT_ERROR, line, checks=[_cannot_judge(line)], baseline=baseline)
    if comparison.refused:
        line = f"[GATE] ERROR vs {baseline}: not comparable: {comparison.refused}"
        return GateVerdict(EXIT_ERROR, line, checks=[_cannot_judge(line)], baseline=baseline)
    checks: list[GateCheck] = []
    for point in comparison.points:
        for metric, bad_sign in SERIES_GATED.items():
            change = point.changes.get(metric)
            name = f"{point.label}: {metric}"
            if change is None or change.change_pct is None:
                checks.append(GateCheck(name, False, "n/a: cannot compare", error=True))
                continue
            if change.low_pct is None:
                failed = change.change_pct * bad_sign > threshold_pct
            else:
                failed = change.verdict == "regression"
            checks.append(GateCheck(name, not failed, change_text(change)))
        errors = point.changes.get("error_rate_percent")
        if errors and errors.a_mean is not None and errors.b_mean is not None:
            rise = errors.b_mean - errors.a_mean
            detail = f"{rise:+.1f} pp (limit {error_rate_pp:+g} pp)"
            checks.append(GateCheck(f"{point.label}: error_rate_percent", rise <= error_rate_pp, detail))
    failures = [f"{c.name} {c.detail}" for c in checks if not c.passed]
    if failures:
        line = f"[GATE] FAIL vs {baseline} ({comparison.against}): " + "; ".join(failures)
        return GateVerdict(EXIT_FAIL, line, failures, checks, baseline)
    passes = "; ".join(f"{c.name} {c.detail}" for c in checks)
    line = f"[GATE] PASS vs {baseline} ({comparison.against}): {passes} (threshold {threshold_pct:g}%)"
    return GateVerdict(EXIT_PASS, line, checks=checks, baseline=baseline)
