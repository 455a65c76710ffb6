"""A performance timeline (pure): each workload fingerprint's runs in end order, baselines marked, and runs
flagged whose ``comparison["vs_<name>"]`` would fail the gate.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from core.gate import comparison_checks
from core.records import shown
from core.report_schema import Report


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
