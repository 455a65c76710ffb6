"""Regression gate for CI (pure): ``make benchmark GATE=v0.2.1`` fails when the run is worse than the baseline.

The sidecar has already compared the new result with every named baseline of the same workload fingerprint; the
gate only reads those changes. One run is a series of one point: :func:`baseline_changes` reads a report's
``comparison.changes_pct["vs_<name>"]`` and a series' ``comparison["vs_<name>"]`` into the same
:class:`PointChanges`, and one body (:func:`gate_verdict`) judges both. A run fails when request
throughput drops, or p99 latency rises, by more than the threshold (default 5 %, GATE_THRESHOLD_PCT), or when its
error rate rises by more than GATE_ERROR_RATE_PP percentage points (default 1); where both runs measured energy,
also when the energy per output token rises by more than the threshold (docs/energy.md). A baseline that cannot be
judged against (no successful request, interrupted) is "cannot judge" (exit 2), never a pass or a regression.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.intervals import Change, change_text
from core.report_schema import Report
from core.series import SeriesReport

EXIT_PASS = 0
EXIT_ERROR = 2  # unknown baseline, or one whose workload differs: the gate cannot judge
EXIT_FAIL = 3

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


def refused_line(baseline: str, reason: str) -> str:
    """``[GATE] ERROR vs v1: not comparable: workload differs …``: the gate's line for a baseline it cannot judge
    against, printed after a run (from the report's comparison) or before one (the benchmark's preflight)."""
    return f"[GATE] ERROR vs {baseline}: not comparable: {reason}"


# gated metric -> direction that is bad (-1: a drop is a regression, +1: a rise is); a series names E2E p99
# ``e2e_p99_ms``, a report's changes_pct ``latency_p99_ms`` (the same figure): _REPORT_NAME maps them.
GATED: dict[str, int] = {"throughput_req_per_sec": -1, "e2e_p99_ms": +1}
WHERE_MEASURED: dict[str, int] = {"energy_j_per_output_token": +1}
"""Gated like :data:`GATED` where both sides measured them (energy needs NVML or RAPL); no check where not."""
BAD_SIGN = {**GATED, **WHERE_MEASURED}
_REPORT_NAME = {"throughput_req_per_sec": "throughput_req_per_sec", "e2e_p99_ms": "latency_p99_ms",
                "energy_j_per_output_token": "energy_j_per_output_token"}  # fmt: skip


@dataclass(frozen=True)
class PointChanges:
    """One point's changes against a baseline: ``label`` ("" for a single run, whose check names carry no prefix),
    ``changes`` gated metric (a key of :data:`BAD_SIGN`; a single run's checks name it as its report does, e.g.
    ``latency_p99_ms``) -> :class:`Change` (an interval when either side repeated), ``error_rise_pp`` the rise of
    the error rate in percentage points (None: unknown)."""

    label: str
    changes: dict[str, Change | None]
    error_rise_pp: float | None


@dataclass(frozen=True)
class BaselineChanges:
    """What a result says about baseline ``name``: ``against`` the reference's id, ``refused`` why it could not be
    compared (None: compared), ``known`` the other baseline names, ``points`` the compared points; ``against``
    None means no baseline of that name was compared."""

    against: str | None
    refused: str | None
    known: list[str]
    points: list[PointChanges]


def report_point(changes_pct: dict[str, float | None]) -> PointChanges:
    """A report's percent changes against one baseline (``latency_p99_ms_pct`` …) as one unlabelled point whose
    changes have no interval."""
    changes: dict[str, Change | None] = {}
    for metric, name in _REPORT_NAME.items():
        value = changes_pct.get(f"{name}_pct")
        if value is None and metric in WHERE_MEASURED:
            continue  # not measured on both sides: not gated
        changes[metric] = None if value is None else Change(
            a_mean=None, b_mean=None, change_pct=value, verdict="no interval (single runs)"
        )
    return PointChanges("", changes, changes_pct.get("error_rate_percent_pp"))


def baseline_changes(result: Report | SeriesReport, baseline: str) -> BaselineChanges:
    """Read ``result``'s comparison with baseline ``baseline``: a report is one unlabelled point whose changes have
    no interval (``changes_pct``), a series one point per compared load point."""
    key = f"vs_{baseline}"
    if isinstance(result, Report):
        comparison = result.comparison
        names = [*comparison.changes_pct, *comparison.refused]
        known = sorted(k.removeprefix("vs_") for k in names if k != "vs_previous")
        if key in comparison.refused:
            return BaselineChanges("?", comparison.refused[key], known, [])
        pct = comparison.changes_pct.get(key)
        if pct is None:
            return BaselineChanges(None, None, known, [])
        return BaselineChanges(comparison.against.get(key, "?"), None, known, [report_point(pct)])
    known = sorted(k.removeprefix("vs_") for k in result.comparison if k != "vs_previous")
    series = result.comparison.get(key)
    if series is None:
        return BaselineChanges(None, None, known, [])
    points = []
    for paired in series.points:
        errors = paired.changes.get("error_rate_percent")
        rise = None
        if errors and errors.a_mean is not None and errors.b_mean is not None:
            rise = errors.b_mean - errors.a_mean
        gated: dict[str, Change | None] = {m: paired.changes.get(m) for m in GATED}
        for m in WHERE_MEASURED:
            change = paired.changes.get(m)
            if change is not None and change.change_pct is not None:
                gated[m] = change
        points.append(PointChanges(f"{paired.label}: ", gated, rise))
    return BaselineChanges(series.against, series.refused, known, points)


def point_checks(point: PointChanges, threshold_pct: float, error_rate_pp: float) -> list[GateCheck]:
    """The checks of one point (error rate, throughput, E2E p99). With an interval (repeats on either side) a metric
    fails only when its whole 95 % interval lies beyond the threshold (verdict ``regression``); a change inside the
    noise passes. Without one, the plain percent change is held to the threshold. A missing change fails (cannot
    judge); the error rate fails when it rises by more than ``error_rate_pp`` percentage points."""
    checks = []
    if point.error_rise_pp is not None:
        rise = point.error_rise_pp
        checks.append(GateCheck(f"{point.label}error_rate_percent", rise <= error_rate_pp,
                                f"{rise:+.1f} pp (limit {error_rate_pp:+g} pp)"))  # fmt: skip
    for key, change in point.changes.items():
        bad_sign = BAD_SIGN[key]
        name = _REPORT_NAME[key] if not point.label else key
        limit = f"(limit {bad_sign * threshold_pct:+g}%)"
        if change is None or change.change_pct is None:
            checks.append(GateCheck(f"{point.label}{name}", False, f"n/a: cannot compare {limit}", error=True))
        elif change.low_pct is None:
            passed = change.change_pct * bad_sign <= threshold_pct
            checks.append(GateCheck(f"{point.label}{name}", passed, f"{change.change_pct:+.1f}% {limit}"))
        else:
            checks.append(GateCheck(f"{point.label}{name}", change.verdict != "regression", change_text(change)))
    return checks


def gate_checks(
    changes_pct: dict[str, float | None], threshold_pct: float, error_rate_pp: float = 1.0
) -> list[GateCheck]:
    """The checks of one report's percent changes (``changes_pct`` of a comparison): :func:`point_checks` of them as
    a single unlabelled point."""
    return point_checks(report_point(changes_pct), threshold_pct, error_rate_pp)


def gate_failures(changes_pct: dict[str, float | None], threshold_pct: float, error_rate_pp: float = 1.0) -> list[str]:
    """Failed metrics, e.g. ``throughput_req_per_sec -12.3% (limit -5%)`` or ``error_rate_percent +50.0 pp (limit
    +1 pp)``; a missing change fails (cannot judge)."""
    return [f"{c.name} {c.detail}" for c in gate_checks(changes_pct, threshold_pct, error_rate_pp) if not c.passed]


def gate_verdict(
    result: Report | SeriesReport, baseline: str, threshold_pct: float, error_rate_pp: float = 1.0
) -> GateVerdict:
    """Judge a run or a series (one point or many) against the named ``baseline``: exit 0 pass, 3 regression, 2
    unknown or incomparable baseline."""
    found = baseline_changes(result, baseline)
    if found.refused is not None:
        line = refused_line(baseline, found.refused)
        return GateVerdict(EXIT_ERROR, line, checks=[_cannot_judge(line)], baseline=baseline)
    if found.against is None:
        hint = f"known: {', '.join(found.known)}" if found.known else "none is marked"
        line = (
            f"[GATE] ERROR vs {baseline}: no baseline named {baseline!r} ({hint}); mark one with "
            f"`make baseline NAME={baseline}`"
        )
        return GateVerdict(EXIT_ERROR, line, checks=[_cannot_judge(line)], baseline=baseline)
    checks = [c for point in found.points for c in point_checks(point, threshold_pct, error_rate_pp)]
    failures = [f"{c.name} {c.detail}" for c in checks if not c.passed]
    if failures:
        line = f"[GATE] FAIL vs {baseline} ({found.against}): " + "; ".join(failures)
        return GateVerdict(EXIT_FAIL, line, failures, checks, baseline)
    passes = "; ".join(f"{c.name} {c.detail}" for c in checks)
    line = f"[GATE] PASS vs {baseline} ({found.against}): {passes} (threshold {threshold_pct:g}%)"
    return GateVerdict(EXIT_PASS, line, checks=checks, baseline=baseline)


def _cannot_judge(line: str) -> GateCheck:
    """The one check of a gate that could not judge (the baseline is unknown or not comparable)."""
    return GateCheck("baseline", False, line.removeprefix("[GATE] "), error=True)
