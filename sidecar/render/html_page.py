"""Self-contained HTML report (pure apart from drawing): tables plus plots embedded as base64 PNGs, no external
resources, so the single file can be mailed or attached to a CI run. Every value is HTML-escaped."""

from __future__ import annotations

import base64
import html
import logging
from collections.abc import Callable, Sequence

from core.records import RequestRecord
from core.report_schema import Report
from core.serverview import overhead_text, verdict_text
from sidecar.render.plots import latency_cdf_png, resources_png, throughput_png
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
    steady_caption,
)

log = logging.getLogger(__name__)
STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:62em;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.15em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left;
vertical-align:top}th{background:#f5f5f5}blockquote{background:#f0f6ff;margin:1em 0;padding:.6em 1em;
border-left:4px solid #4a90d9}.warn{background:#fff4e5;border-left-color:#e69500}img{max-width:100%}
.muted{color:#777}code{font-size:.9em}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _pairs(rows: Sequence[Row]) -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _figure(title: str, draw: Callable[[], bytes | None]) -> str:
    """An inline PNG, or a note when there is no data or drawing failed (a plot never stops a report)."""
    try:
        png = draw()
    except Exception as exc:  # matplotlib failures (fonts, backends) must not lose the report
        log.warning("plot %r failed: %s", title, exc)
        return f'<p class="muted">{_e(title)}: could not be drawn ({_e(type(exc).__name__)}).</p>'
    if png is None:
        return f'<p class="muted">{_e(title)}: no data.</p>'
    data = base64.b64encode(png).decode("ascii")
    return f'<figure><img alt="{_e(title)}" src="data:image/png;base64,{data}"></figure>'


def _comparison(report: Report) -> str:
    c = report.comparison
    parts = [_grid(comparison_header(), comparison_rows(report))] if c.changes_pct else []
    parts.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in c.notes) + "</ul>")
    parts.append(f'<p class="muted">Workload fingerprint <code>{_e(c.fingerprint)}</code></p>')
    return "".join(parts)


def _logs(report: Report) -> str:
    logs = report.logs
    if not logs.found:
        return f"<p>{_e(logs.log_file)} not found.</p>"
    rows = [
        ("Warnings in window", str(len(logs.warnings_in_window))),
        ("Errors in window", str(len(logs.errors_in_window))),
    ]
    errors = "".join(f"<li><code>{_e(line)}</code></li>" for line in logs.errors_in_window[:20])
    return _pairs(rows) + (f"<ul>{errors}</ul>" if errors else "")


def render_html(report: Report, records: Sequence[RequestRecord]) -> str:
    """The whole report as one HTML document (plots from ``records``, ``metrics.windows`` and the timeline)."""
    e = report.environment
    sections = [
        f"<h1>Benchmark report {_e(report.report_id)}</h1>",
        f'<p class="muted">{_e(report.timestamp)} &middot; model <b>{_e(e.served_model_name)}</b> &middot; '
        f"schema {_e(report.schema_version)}</p>",
        f"<blockquote>{_e(report.metrics.key_insight)}</blockquote>",
    ]
    if e.synthetic:
        sections.append(f'<blockquote class="warn">Synthetic model: {_e(e.synthetic_reason)}</blockquote>')
    sections += [f'<blockquote class="warn">{_e(note)}</blockquote>' for note in outcome_notes(report)]
    sections += ["<h2>Results</h2>", _pairs(headline_rows(report)), "<h2>Comparison</h2>", _comparison(report)]
    sections += [
        "<h2>Latency</h2>",
        _figure("Latency CDF", lambda: latency_cdf_png(records)),
        "<h2>Throughput</h2>",
        _figure("Throughput over time", lambda: throughput_png(report.metrics.windows, report.metrics.steady)),
        f'<p class="muted">{_e(steady_caption(report))}</p>',
        "<h2>Resources</h2>",
        _figure("Memory over time", lambda: resources_png(report.resources.timeline)),
        _pairs(resources_rows(report)),
    ]
    if report.errors.by_kind:
        sections += ["<h2>Errors</h2>", _pairs(error_rows(report))]
    if report.server is not None:
        verdict = verdict_text(report.server)
        sections += ["<h2>vLLM /metrics cross-check</h2>", f"<p>Client and server: {_e(verdict)}</p>"]
        sections += [f"<p>Client overhead: {_e(overhead_text(o))}</p>" for o in report.server.client_overhead]
        if report.server.client_overhead:
            sections.append(_grid(overhead_header(), overhead_rows(report.server)))
    if report.cluster is not None:  # engines behind vLLM's router: one row each
        sections += ["<h2>Replicas</h2>", *[f"<p>{_e(line)}</p>" for line in cluster_lines(report.cluster)]]
        sections.append(_grid(replica_header(), replica_rows(report.cluster)))
    sections += ["<h2>Environment</h2>", _pairs(environment_rows(report))]
    sections += ["<h2>Configuration</h2>", _pairs(config_rows(report)), "<h2>vLLM log</h2>", _logs(report)]
    sections.append(
        f'<p class="muted">Files: {_e(report.report_id)}.json, {_e(report.requests_file)}'
        + (f", {_e(report.markdown_file)}" if report.markdown_file else "")
        + "</p>"
    )
    sections.append(
        f'<p class="muted">Compare with another run: <code>make compare A={_e(report.report_id)} B=…</code>, or the '
        "sidecar's <code>/compare</code> page (both curves and every difference side by side).</p>"
    )
    body = "\n".join(sections)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(report.report_id)}</title><style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n"
    )
