"""Markdown pages of a run, a series and an A/B comparison, from the shared view rows."""

from __future__ import annotations

from collections.abc import Sequence

from core.comparison import ABComparison, report_notes
from core.report_schema import Report
from core.series_stats import SeriesReport
from core.serverview import verdict_text
from core.serverview_overhead import overhead_text
from sidecar.render import view_rows as v
from sidecar.render.conversation_rows import turn_header, turn_rows
from sidecar.render.energy_rows import energy_changes, energy_sections
from sidecar.render.replica_rows import cluster_lines, replica_header, replica_rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A GitHub-flavoured Markdown table (pipes in cells escaped)."""
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _pairs(rows: Sequence[v.Row]) -> list[str]:
    return table(["Item", "Value"], [list(r) for r in rows])


def render_markdown(report: Report) -> str:
    """The report as Markdown."""
    e = report.environment
    lines = [
        f"# Benchmark report {report.report_id}",
        "",
        f"{report.timestamp} - model **{e.served_model_name or 'unknown'}** - schema {report.schema_version}",
        "",
        f"> {report.metrics.key_insight}",
        "",
    ]
    if e.synthetic:
        lines += [f"> **Synthetic model**: {e.synthetic_reason}", ""]
    for note in v.outcome_notes(report):
        lines += [f"> **{note}**", ""]
    lines += ["## Results", "", *_pairs(v.headline_rows(report)), ""]
    if report.metrics.turns:  # conversations: one row per turn index
        lines += ["## Conversations: per turn", "", *table(turn_header(), turn_rows(report)), ""]
    lines += ["## Comparison", ""]
    if compared := v.comparison_rows(report):
        lines += [*table(v.comparison_header(), compared), ""]
    lines += [f"- {line}" for line in [*energy_changes(report), *report_notes(report)]]
    lines += [f"- workload fingerprint: `{report.fingerprint}`", ""]
    if report.server is not None:
        verdict = verdict_text(report.server)
        lines += ["## vLLM /metrics cross-check", "", f"Client and server: {verdict}", ""]
        lines += [f"Client overhead: {overhead_text(o)}" for o in report.server.client_overhead]
        if report.server.client_overhead:
            lines += ["", *table(v.overhead_header(), v.overhead_rows(report.server)), ""]
    if report.cluster is not None:  # engines behind vLLM's router: one row each
        lines += ["## Replicas", "", *[f"- {line}" for line in cluster_lines(report.cluster)], ""]
        lines += [*table(replica_header(), replica_rows(report.cluster)), ""]
    environment = v.environment_rows(report.environment, report.resources.gpu_unavailable_reason)
    lines += ["## Environment", "", *_pairs(environment), ""]
    lines += ["## Configuration", "", *_pairs(v.config_rows(report.config)), ""]
    lines += ["## Resources", "", *_pairs(v.resources_rows(report)), ""]
    for title, rows in energy_sections(report):
        lines += [f"## {title}", "", *_pairs(rows), ""]
    if report.errors.by_kind:
        lines += ["## Errors", "", *_pairs(v.error_rows(report)), ""]
    logs = report.logs
    lines += ["## vLLM log", ""]
    if logs.found:
        lines += [f"- warnings / errors in the window: {len(logs.warnings_in_window)} / {len(logs.errors_in_window)}"]
        lines += [f"  - `{line}`" for line in logs.errors_in_window[:10]]
    else:
        lines.append(f"- {logs.log_file} not found")
    lines += ["", "## Files", "", f"- JSON: `{report.report_id}.json`", f"- per-request rows: `{report.requests_file}`"]
    if report.html_file:
        lines.append(f"- HTML with plots: [{report.html_file}]({report.html_file})")
    return "\n".join(lines) + "\n"


def series_markdown(series: SeriesReport) -> str:
    """The series report as Markdown."""
    lines = [f"# Series report {series.series_id}", "", f"> {series.knee.line}", ""]
    lines += [f"> {n}" for n in series.knee.notes]
    header, rows = v.point_table(series)
    lines += ["## Load points", "", *table(header, rows), "", f"Means ± 95% CI half width ({series.interval_method})."]
    for name, comparison in series.comparison.items():
        lines += ["", f"## {name} ({comparison.against})", ""]
        if comparison.refused:
            lines.append(f"Not compared: {comparison.refused}")
        else:
            lines += table(*v.change_table(comparison.points))
    lines += ["", *(f"- {n}" for n in series.notes)]
    if series.html_file:
        lines += ["", f"HTML with plots: [{series.html_file}]({series.html_file})"]
    return "\n".join(lines) + "\n"


def compare_markdown(comparison: ABComparison) -> str:
    """The comparison as Markdown."""
    diffs = [[d.group, d.field, str(d.a), str(d.b)] for d in comparison.differences]
    lines = [f"# A/B comparison {comparison.compare_id}", "", f"- A: {v.side_line(comparison.a)}",
             f"- B: {v.side_line(comparison.b)}", "", "## What differs", ""]
    lines += table(["group", "field", "A", "B"], diffs) if diffs else ["No configuration field differs."]
    lines += ["", "## B against A", "", *table(*v.change_table(comparison.points)), ""]
    lines += [f"- {n}" for n in comparison.notes]
    return "\n".join(lines) + "\n"
