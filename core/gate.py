"""Regression gate for CI (pure): ``make benchmark GATE=v0.2.1`` fails when the run is worse than the baseline.

It reads the sidecar's ``comparison["vs_<name>"]``: throughput down, p99 latency or (both measured) energy per output
token up by more than GATE_THRESHOLD_PCT, or error rate up by more than GATE_ERROR_RATE_PP, fails; a baseline that
cannot be judged, or prefix-cache hit rates far apart, is "cannot judge" (exit 2). The performance timeline
(``make history``): each workload fingerprint's runs in end order, baselines marked, and runs flagged whose
``comparison["vs_<name>"]`` would fail the gate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from core.intervals import Comparison, change_text
from core.records import shown
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


class HistoryPoint(BaseModel):
    """One run on a timeline."""

    report_id: str
    timestamp: str = Field(description="ISO 8601, when the report was built.")
    run_ended_at: float = Field(description="Unix time, s.")
    throughput_req_per_sec: float
    ttft_p99_ms: float | None
    e2e_p99_ms: float | None
    error_rate_percent: float | None = Field(description="None: no measured request ended.")
    gpu_mem_peak_gb: float | None = Field(description="GiB; None without a GPU.")
    energy_j_per_output_token: float | None = Field(default=None, description="J; None where not measured.")
    cost_usd_per_1m_output_tokens: float | None = Field(default=None, description="USD; None without a price.")
    vllm_version: str | None = None
    baselines: list[str] = Field(default_factory=list, description="Baseline names that point at this run.")
    gate_failures: list[str] = Field(
        default_factory=list, description="``vs_<name>: <metric change>`` for each failed gate against a baseline."
    )
    flags: list[str] = Field(
        default_factory=list,
        description="How the run did not go as planned: ``interrupted``, ``ended early (server down)``, "
        "``vLLM switched``, ``all failed``; empty for a run that ran to its end with an answer.",
    )


def run_flags(report: Report) -> list[str]:
    """A run's timeline flags: interrupted, ended early, all failed, all cut."""
    flags = ["interrupted"] if report.interrupted else []
    flags += ["ended early (server down)"] if report.server_down else []
    flags += ["vLLM switched"] if report.engine_switch else []
    flags += ["all failed"] if report.metrics.requests_total and not report.metrics.requests_ok else []
    flags += ["all cut"] if report.metrics.requests_incomplete and not report.metrics.requests_total else []
    return flags


class Timeline(BaseModel):
    """One workload's runs in time order."""

    fingerprint: str
    label: str = Field(description="What the workload is, e.g. 'closed loop, c=8, 200 requests, max_tokens 128'.")
    points: list[HistoryPoint]


def workload_label(report: Report) -> str:
    """A short description of the workload of ``report`` (its load shape, size, lengths, dataset, model)."""
    c = report.config
    shape = f"rate {c.rate_req_per_sec:g} req/s" if c.rate_req_per_sec is not None else f"c={c.concurrency}"
    size = f"{c.requests} requests" if c.requests else f"{c.duration_s:g} s" if c.duration_s else "?"
    extra = f", prefixes {c.prefix_count}×{c.prefix_len_tokens}" if c.prefix_len_tokens else ""
    extra += f", trace ×{c.trace_speed:g}" if c.trace_file else ""
    model = report.environment.served_model_name or c.model
    return f"{shape}, {size}, max_tokens {c.max_tokens}, {c.dataset.rsplit('/', 1)[-1]}{extra}, {model}"


def timelines(
    reports: Sequence[Report], baselines: dict[str, str], threshold_pct: float = 5.0, error_rate_pp: float = 1.0
) -> list[Timeline]:
    """One timeline per workload fingerprint of ``reports`` (ones without are left out), the most recent workload
    first; ``baselines``: ``name -> report id`` (``baselines.json``; series ids are ignored); ``threshold_pct``,
    ``error_rate_pp``: the gate's tolerances."""
    marks: dict[str, list[str]] = {}
    for name, target in sorted(baselines.items()):
        marks.setdefault(target, []).append(name)
    groups: dict[str, list[Report]] = {}
    for report in sorted(reports, key=lambda r: (r.run_ended_at, r.report_id)):
        if report.fingerprint:
            groups.setdefault(report.fingerprint, []).append(report)
    out = []
    for fingerprint, runs in groups.items():
        points = []
        for r in runs:
            failed = [
                f"{key}: {check.name} {check.detail}"
                for key, comparison in r.comparison.items()
                if key != "vs_previous"
                for check in comparison_checks(comparison, threshold_pct, error_rate_pp)
                if not check.passed and not check.error
            ]
            points.append(
                HistoryPoint(
                    **r.model_dump(include={"report_id", "timestamp", "run_ended_at"}),
                    **r.metrics.model_dump(include={"throughput_req_per_sec", "error_rate_percent", "gpu_mem_peak_gb",
                                                    "energy_j_per_output_token", "cost_usd_per_1m_output_tokens"}),
                    ttft_p99_ms=r.metrics.ttft.p99_ms,
                    e2e_p99_ms=r.metrics.e2e.p99_ms,
                    vllm_version=r.environment.vllm_version,
                    baselines=marks.get(r.report_id, []),
                    gate_failures=failed,
                    flags=run_flags(r),
                )
            )
        out.append(Timeline(fingerprint=fingerprint, label=workload_label(runs[-1]), points=points))
    out.sort(key=lambda t: -t.points[-1].run_ended_at)
    return out


def history_table(lines_of: Sequence[Timeline]) -> list[str]:
    """The terminal table: per workload a header, then one line per run (oldest first) with its figures (energy and cost
    columns where some run has them), baseline marks, run flags and gate failures."""
    lines = []
    for t in lines_of:
        energy = any(p.energy_j_per_output_token is not None for p in t.points)
        cost = any(p.cost_usd_per_1m_output_tokens is not None for p in t.points)
        extra = (f" {'J/tok':>7}" if energy else "") + (f" {'$/1M out':>8}" if cost else "")
        lines.append(f"[HISTORY] workload {t.fingerprint}: {t.label} ({len(t.points)} run(s))")
        lines.append(
            f"  {'report':<32} {'req/s':>7} {'TTFT p99':>9} {'E2E p99':>8} {'err %':>6} {'GPU GiB':>7}{extra}  notes"
        )
        for p in t.points:
            notes = [f"[baseline: {', '.join(p.baselines)}]"] if p.baselines else []
            notes += [f"[{flag}]" for flag in p.flags]
            notes += [f"FAIL {f}" for f in p.gate_failures]
            figures = (f" {shown(p.energy_j_per_output_token, 3):>7}" if energy else "") + (
                f" {shown(p.cost_usd_per_1m_output_tokens, 2):>8}" if cost else "")
            lines.append(
                f"  {p.report_id:<32} {p.throughput_req_per_sec:>7.2f} {shown(p.ttft_p99_ms):>9} "
                f"{shown(p.e2e_p99_ms):>8} {shown(p.error_rate_percent, 1):>6} {shown(p.gpu_mem_peak_gb, 2):>7}"
                f"{figures}  {' '.join(notes)}".rstrip()
            )
    return lines
