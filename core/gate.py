"""Regression gate for CI (pure): ``make benchmark GATE=v0.2.1`` fails when the run is worse than the baseline.

It reads the sidecar's ``comparison["vs_<name>"]``: throughput down, p99 latency or (both measured) energy per output
token up by more than GATE_THRESHOLD_PCT, or error rate up by more than GATE_ERROR_RATE_PP, fails; a baseline that
cannot be judged, or prefix-cache hit rates far apart, is "cannot judge" (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.intervals import Comparison, change_text
from core.report_schema import Report
from core.series_stats import SeriesReport

EXIT_PASS = 0
EXIT_ERROR = 2  # unknown baseline, or one whose workload differs: the gate cannot judge
EXIT_FAIL = 3

@dataclass(frozen=True)
class GateCheck:
    """One gated metric (a JUnit case): ``passed`` False: regression; ``error`` True: could not judge."""

    name: str
    passed: bool
    detail: str
    error: bool = False


@dataclass(frozen=True)
class GateVerdict:
    """The gate's decision: terminal ``line``, ``failures``, every ``checks``, the ``baseline`` name."""

    exit_code: int
    line: str
    failures: list[str] = field(default_factory=list)
    checks: list[GateCheck] = field(default_factory=list)
    baseline: str = ""


def refused_line(baseline: str, reason: str) -> str:
    """``[GATE] ERROR vs v1: not comparable: ...``: the line for a baseline it cannot judge against."""
    return f"[GATE] ERROR vs {baseline}: not comparable: {reason}"


# gated metric -> direction that is bad (-1: a drop is a regression, +1: a rise is); a series' check names E2E p99
# ``e2e_p99_ms``, a single run's ``latency_p99_ms`` as its report does (the same figure): _REPORT_NAME maps them.
GATED: dict[str, int] = {"throughput_req_per_sec": -1, "e2e_p99_ms": +1}
WHERE_MEASURED: dict[str, int] = {"energy_j_per_output_token": +1}
"""Gated like :data:`GATED` where both sides measured them (energy needs NVML or RAPL); no check where not."""
_REPORT_NAME = {"e2e_p99_ms": "latency_p99_ms"}


def comparison_checks(comparison: Comparison, threshold_pct: float, error_rate_pp: float = 1.0) -> list[GateCheck]:
    """The checks of every compared point (error rate, throughput, E2E p99, energy per token): with an interval a
    metric fails when it lies wholly beyond the threshold, else the plain change is held to it; a missing change fails;
    the error rate fails above ``error_rate_pp`` points. Series points prefix their label."""
    checks = []
    for point in comparison.points:
        prefix = f"{point.label}: " if point.label else ""
        errors = point.changes.get("error_rate_percent")
        if errors is not None and errors.a_mean is not None and errors.b_mean is not None:
            rise = errors.b_mean - errors.a_mean
            checks.append(GateCheck(f"{prefix}error_rate_percent", rise <= error_rate_pp,
                                    f"{rise:+.1f} pp (limit {error_rate_pp:+g} pp)"))  # fmt: skip
        for key, bad_sign in {**GATED, **WHERE_MEASURED}.items():
            change = point.changes.get(key)
            if key in WHERE_MEASURED and (change is None or change.change_pct is None):
                continue  # not measured on both sides: not gated
            name = f"{prefix}{key if point.label else _REPORT_NAME.get(key, key)}"
            limit = f"(limit {bad_sign * threshold_pct:+g}%)"
            if change is None or change.change_pct is None:
                checks.append(GateCheck(name, False, f"n/a: cannot compare {limit}", error=True))
            elif change.low_pct is None:
                passed = change.change_pct * bad_sign <= threshold_pct
                checks.append(GateCheck(name, passed, f"{change.change_pct:+.1f}% {limit}"))
            else:
                checks.append(GateCheck(name, change.verdict != "regression", change_text(change)))
    return checks


def gate_verdict(
    result: Report | SeriesReport, baseline: str, threshold_pct: float, error_rate_pp: float = 1.0
) -> GateVerdict:
    """Judge a run or series by its comparison with ``baseline``: exit 0 pass, 3 regression, 2 cannot judge (the
    baseline unknown or not comparable, or the prefix cache far apart: one ``baseline`` check)."""
    comparison = result.comparison.get(f"vs_{baseline}")
    line = ""
    if comparison is None:
        known = sorted(k.removeprefix("vs_") for k in result.comparison if k != "vs_previous")
        hint = f"known: {', '.join(known)}" if known else "none is marked"
        line = (
            f"[GATE] ERROR vs {baseline}: no baseline named {baseline!r} ({hint}); mark one with "
            f"`make baseline NAME={baseline}`"
        )
    elif comparison.refused is not None:
        line = refused_line(baseline, comparison.refused)
    elif comparison.prefix_cache_percent is not None:
        then, now = comparison.prefix_cache_percent
        line = (f"[GATE] ERROR vs {baseline} ({comparison.against}): cannot judge: vLLM's prefix cache served "
                f"{then:.0f}% of the prompt tokens then and {now:.0f}% now, so the changes are partly the cache's; "
                "restart vLLM (./start_vllm.sh) before each run, or serve with "
                "VLLM_EXTRA_ARGS=--no-enable-prefix-caching")  # fmt: skip
    if comparison is None or line:
        check = GateCheck("baseline", False, line.removeprefix("[GATE] "), error=True)
        return GateVerdict(EXIT_ERROR, line, checks=[check], baseline=baseline)
    checks = comparison_checks(comparison, threshold_pct, error_rate_pp)
    failures = [f"{c.name} {c.detail}" for c in checks if not c.passed]
    if failures:
        line = f"[GATE] FAIL vs {baseline} ({comparison.against}): " + "; ".join(failures)
        return GateVerdict(EXIT_FAIL, line, failures, checks, baseline)
    passes = "; ".join(f"{c.name} {c.detail}" for c in checks)
    line = f"[GATE] PASS vs {baseline} ({comparison.against}): {passes} (threshold {threshold_pct:g}%)"
    return GateVerdict(EXIT_PASS, line, checks=checks, baseline=baseline)
