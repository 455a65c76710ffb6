"""Markdown summary of a report (pure), written next to its JSON as ``benchmark_report_X.md``."""

from __future__ import annotations

from collections.abc import Sequence

from core.report_schema import Report
from core.serverview import overhead_text, verdict_text
from sidecar.render.replica_rows import cluster_lines, replica_header, replica_rows
from sidecar.render.view_rows import (
    Row,
    comparison_header,
    comparison_rows,
    config_rows,
    environment_rows,
    error_rows,
    headline_rows,
    outcome_notes,
    overhead_header,
    overhead_rows,
    resources_rows,
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A GitHub-flavoured Markdown table (pipes in cells escaped)."""
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _pairs(rows: Sequence[Row]) -> list[str]:
    return table(["Item", "Value"], [list(r) for r in rows])


def render_markdown(report: Report) -> str:
    """The report as Markdown: headline, comparisons, environment, config, resources, errors, logs, files."""
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
    for note in outcome_notes(report):
        lines += [f"> **{note}**", ""]
    lines += ["## Results", "", *_pairs(headline_rows(report)), ""]
    lines += ["## Comparison", ""]
    if report.comparison.changes_pct:
        lines += [*table(comparison_header(), comparison_rows(report)), ""]
    lines += [f"- {note}" for note in report.comparison.notes]
    lines += [f"- workload fingerprint: `{report.comparison.fingerprint}`", ""]
    if report.server is not None:
        verdict = verdict_text(report.server)
        lines += ["## vLLM /metrics cross-check", "", f"Client and server: {verdict}", ""]
        lines += [f"Client overhead: {overhead_text(o)}" for o in report.server.client_overhead]
        if report.server.client_overhead:
            lines += ["", *table(overhead_header(), overhead_rows(report.server)), ""]
    if report.cluster is not None:  # engines behind vLLM's router: one row each
        lines += ["## Replicas", "", *[f"- {line}" for line in cluster_lines(report.cluster)], ""]
        lines += [*table(replica_header(), replica_rows(report.cluster)), ""]
    lines += ["## Environment", "", *_pairs(environment_rows(report)), ""]
    lines += ["## Configuration", "", *_pairs(config_rows(report)), ""]
    lines += ["## Resources", "", *_pairs(resources_rows(report)), ""]
    if report.errors.by_kind:
        lines += ["## Errors", "", *_pairs(error_rows(report)), ""]
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
