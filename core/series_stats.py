"""Series of runs (pure): load sweeps and repeats, per-point 95 % intervals and the SLO knee.

A point meets the SLO when its mean ``goodput_percent`` >= SLO_ATTAINMENT_PCT; the knee is the highest such load in
planned order (synchronous first, throughput last).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from core.fingerprint import workload_fingerprint
from core.intervals import CONFIDENCE, METHOD, Comparison, Interval, interval
from core.records import LatencyStats
from core.report_schema import SCHEMA_VERSION, BenchmarkConfig, Environment, Report

PointKind = Literal["synchronous", "throughput", "concurrency", "rate"]
SERIES_ID_RE = re.compile(r"benchmark_series_[0-9]{8}_[0-9]{6}(?:_[0-9]{1,4})?")
COMPARE_ID_RE = re.compile(r"benchmark_compare_[0-9]{8}_[0-9]{6}(?:_[0-9]{1,4})?")
"""Series and comparison ids, matched whole (``fullmatch``: ``$`` would let a trailing newline through)."""


def is_series_id(text: str) -> bool:
    """True for a series id (``benchmark_series_YYYYMMDD_HHMMSS``, ``_2`` ... when two share a second)."""
    return bool(SERIES_ID_RE.fullmatch(text))

# metric -> (label, unit, +1 when higher is better / -1 when lower is better)
SERIES_METRICS: dict[str, tuple[str, str, int]] = {
    "throughput_req_per_sec": ("throughput", "req/s", +1),
    "output_tokens_per_sec": ("output tok/s", "tok/s", +1),
    "goodput_req_per_sec": ("goodput", "req/s", +1),
    "goodput_percent": ("within SLO", "%", +1),
    "ttft_p50_ms": ("TTFT p50", "ms", -1),
    "ttft_p99_ms": ("TTFT p99", "ms", -1),
    "answer_ttft_p50_ms": ("answer TTFT p50", "ms", -1),  # reasoning streams only (the answer's first token)
    "answer_ttft_p99_ms": ("answer TTFT p99", "ms", -1),
    "itl_p50_ms": ("ITL p50", "ms", -1),
    "itl_p99_ms": ("ITL p99", "ms", -1),
    "e2e_p50_ms": ("E2E p50", "ms", -1),
    "e2e_p99_ms": ("E2E p99", "ms", -1),
    "tpot_p50_ms": ("TPOT p50", "ms", -1),
    "error_rate_percent": ("error rate", "%", -1),
    "prefix_cache_hit_rate_percent": ("prefix-cache hit rate", "%", +1),
    # energy and cost (docs/energy.md): None where not measured or not priced
    "energy_j_per_output_token": ("energy / output token", "J", -1),
    "output_tokens_per_j": ("output tokens / J", "tok/J", +1),
    "cost_usd_per_1m_output_tokens": ("cost / 1M output tokens", "USD", -1),
    "cost_usd_per_1m_total_tokens": ("cost / 1M total tokens", "USD", -1),
    "energy_cost_usd_per_1m_output_tokens": ("energy cost / 1M output tokens", "USD", -1),
}
LATENCY_METRIC_RE = re.compile(r"(ttft|answer_ttft|itl|e2e|tpot)_(p[0-9]+_ms)")
"""A :data:`SERIES_METRICS` name of a latency percentile: the distribution and its field (``ttft_p99_ms``)."""


def report_values(report: Report) -> dict[str, float | None]:
    """The :data:`SERIES_METRICS` of one report: latency percentiles from their distributions (a run without
    reasoning has no answer TTFT), the prefix-cache hit rate from the server view, the rest from the metrics by name."""
    m = report.metrics
    answer_ttft = m.reasoning.answer_ttft if m.reasoning else LatencyStats()
    values: dict[str, float | None] = {}
    for name in SERIES_METRICS:
        if found := LATENCY_METRIC_RE.fullmatch(name):
            values[name] = getattr(answer_ttft if found[1] == "answer_ttft" else getattr(m, found[1]), found[2])
        elif name == "prefix_cache_hit_rate_percent":
            values[name] = report.server.prefix_cache_hit_rate_percent if report.server else None
        else:
            values[name] = getattr(m, name)
    return values


class PointPlan(BaseModel):
    """One load point as the benchmark ran it: what it is and the reports of its runs."""

    label: str = Field(description="e.g. 'synchronous', 'rate 1.5 req/s', 'concurrency 8', 'maximum throughput'.")
    kind: PointKind
    concurrency: int | None = Field(default=None, description="Closed loop: users.")
    rate_req_per_sec: float | None = Field(default=None, description="Open loop: offered arrivals per second.")
    report_ids: list[str] = Field(default_factory=list, description="One report per run, in run order.")


class SeriesPoint(PointPlan):
    """A measured load point: the metrics' means and intervals over its runs and its SLO verdict."""

    fingerprint: str | None = Field(default=None, description="Workload fingerprint of the point's runs.")
    metrics: dict[str, Interval] = Field(default_factory=dict, description="Metric -> mean and interval over runs.")
    meets_slo: bool | None = Field(default=None, description="None without an SLO.")
    interrupted: bool = False


class Knee(BaseModel):
    """The highest load that still meets the SLO (None when no point does, or without an SLO)."""

    index: int | None = Field(default=None, description="Index into ``points``.")
    label: str | None = None
    line: str = Field(description="The one summary line, e.g. 'Knee (SLO ...): rate 2 req/s: 1.9 req/s, ...'.")
    notes: list[str] = Field(default_factory=list)


class SeriesReport(BaseModel):
    """A sweep or a repeated run: ``reports/benchmark_series_YYYYMMDD_HHMMSS.json``."""

    schema_version: str = SCHEMA_VERSION
    kind: Literal["series"] = "series"
    series_id: str
    timestamp: str = Field(description="ISO 8601, UTC, when the series report was built.")
    sweep: str | None = Field(default=None, description="SWEEP as given; None for a repeat of one point.")
    repeat: int = Field(description="Runs per point.")
    config: BenchmarkConfig = Field(description="The plan every point started from (its load fields per point).")
    environment: Environment
    slo: dict[str, float] = Field(default_factory=dict)
    slo_attainment_pct: float
    confidence_level: float = CONFIDENCE
    interval_method: str = METHOD
    points: list[SeriesPoint]
    knee: Knee
    comparison: dict[str, Comparison] = Field(
        default_factory=dict, description="'vs_previous' / 'vs_<baseline>' -> per-point changes with intervals."
    )
    interrupted: bool = Field(default=False, description="Stopped early (Ctrl-C): the points measured so far.")
    notes: list[str] = Field(default_factory=list)
    markdown_file: str | None = None
    html_file: str | None = None


def series_unusable_reason(series: SeriesReport) -> str | None:
    """Why ``series`` cannot be a baseline (no point, or stopped early); None when it can."""
    if not series.points:
        return f"{series.series_id} has no measured point (nothing to compare with)"
    if series.interrupted or any(p.interrupted for p in series.points):
        return f"{series.series_id} was interrupted (Ctrl-C) before its planned end"
    return None


def measure_point(plan: PointPlan, reports: list[Report], slo: dict[str, float], attainment_pct: float) -> SeriesPoint:
    """Means and intervals of ``reports`` (the runs of ``plan``) and whether the point meets the SLO."""
    values = [report_values(r) for r in reports]
    metrics = {name: iv for name in SERIES_METRICS if (iv := interval([v[name] for v in values])) is not None}
    meets = None
    if slo:
        within = metrics.get("goodput_percent")
        meets = within is not None and within.mean >= attainment_pct
    return SeriesPoint(
        **plan.model_dump(),
        fingerprint=workload_fingerprint(reports[0].config, reports[0].environment) if reports else None,
        metrics=metrics,
        meets_slo=meets,
        interrupted=any(r.interrupted for r in reports),
    )


PREFIX_CACHE_GAP_PP = 20.0
"""Prefix-cache hit rates (percentage points) further apart than this, between two compared runs or points or among
one point's runs, get a note (and the gate cannot judge such a comparison)."""


def prefix_cache_spread_notes(points: list[SeriesPoint], gap_pp: float = PREFIX_CACHE_GAP_PP) -> list[str]:
    """A note per point whose runs' prefix-cache hit rates lie more than ``gap_pp`` apart (repeats hit the cache, so the
    interval holds its effect)."""
    notes = []
    for point in points:
        rates = point.metrics.get("prefix_cache_hit_rate_percent")
        if rates is not None and len(rates.values) > 1 and max(rates.values) - min(rates.values) > gap_pp:
            label = f"point {point.label}: " if point.label else ""
            notes.append(
                f"{label}vLLM's prefix cache served {min(rates.values):.0f}% to {max(rates.values):.0f}% of the "
                "prompt tokens across its runs (later runs repeat earlier prompts): its intervals include that; "
                "restart vLLM between runs, or serve with VLLM_EXTRA_ARGS=--no-enable-prefix-caching"
            )
    return notes


def slo_text(slo: dict[str, float], attainment_pct: float) -> str:
    """``ttft_ms<=500,e2e_ms<=2000 in >=95% of requests``."""
    return ",".join(f"{k}<={v:g}" for k, v in slo.items()) + f" in >={attainment_pct:g}% of requests"


KNEE_FIGURES = {
    "throughput_req_per_sec": "{:.2f} req/s", "output_tokens_per_sec": "{:.0f} output tok/s",
    "ttft_p99_ms": "TTFT p99 {:.0f} ms", "itl_p99_ms": "ITL p99 {:.0f} ms", "e2e_p99_ms": "E2E p99 {:.0f} ms",
    "goodput_percent": "{:.0f}% within SLO", "energy_j_per_output_token": "{:.3g} J/output token",
    "cost_usd_per_1m_output_tokens": "${:.3g}/1M output tokens",
    "cost_usd_per_1m_total_tokens": "${:.3g}/1M total tokens",
    "energy_cost_usd_per_1m_output_tokens": "energy ${:.3g}/1M output tokens",
}  # fmt: skip
"""The knee line's figures (means; ``(±half width)`` with runs), e.g. ``1.93 req/s, 240 output tok/s, ...``."""


def find_knee(points: list[SeriesPoint], slo: dict[str, float], attainment_pct: float) -> Knee:
    """The last point (in load order) that meets the SLO; notes when a lower load failed it (noise or a cliff)."""
    if not slo:
        return Knee(line="Knee: no SLO given (set SLO=ttft_ms<=500,... to mark the highest load that meets it)")
    meeting = [i for i, p in enumerate(points) if p.meets_slo]
    what = slo_text(slo, attainment_pct)
    if not meeting:
        return Knee(line=f"Knee (SLO {what}): no load point meets the SLO")
    index = meeting[-1]
    knee = points[index]
    notes = [f"{p.label} (below the knee) does not meet the SLO" for p in points[:index] if p.meets_slo is False]
    above = "the highest point measured" if index == len(points) - 1 else f"next: {points[index + 1].label} fails it"
    figures = ", ".join(fmt.format(iv.mean) + ("" if iv.half_width is None else f" (±{iv.half_width:.3g})")
                        for name, fmt in KNEE_FIGURES.items() if (iv := knee.metrics.get(name)))  # fmt: skip
    line = f"Knee (SLO {what}): {knee.label}: {figures} ({above})"
    return Knee(index=index, label=knee.label, line=line, notes=notes)


def report_as_point(report: Report, label: str | None = None) -> SeriesPoint:
    """A single report as a one-run point; ``label`` overrides its load's."""
    config = report.config
    closed = config.rate_req_per_sec is None
    plan = PointPlan(
        label=label if label is not None else
        f"concurrency {config.concurrency}" if closed else f"rate {config.rate_req_per_sec:g} req/s",
        kind="concurrency" if closed else "rate",
        concurrency=config.concurrency if closed else None,
        rate_req_per_sec=config.rate_req_per_sec,
        report_ids=[report.report_id],
    )
    return measure_point(plan, [report], config.slo, 100.0)
