"""Self-contained HTML pages of a run, a series and an A/B comparison: the view rows plus base64 PNG plots, no
external resources; every value HTML-escaped."""

from __future__ import annotations

import base64
import html
import logging
from collections.abc import Callable, Sequence

from core.comparison import ABComparison, report_notes
from core.records import RequestRecord
from core.report_schema import Report
from core.series_stats import SeriesReport, slo_text
from core.serverview import verdict_text
from core.serverview_overhead import overhead_text
from sidecar.render import view_rows as v
from sidecar.render.conversation_rows import turn_header, turn_rows
from sidecar.render.energy_rows import energy_changes, energy_sections
from sidecar.render.plots import Curve, goodput_png, latency_cdf_png, latency_curves_png, resources_png, throughput_png
from sidecar.render.replica_rows import cluster_lines, replica_header, replica_rows

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


def _pairs(rows: Sequence[v.Row]) -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _figure(title: str, draw: Callable[[], bytes | None]) -> str:
    """An inline PNG, or a note when there is no data or drawing failed."""
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
    rows = v.comparison_rows(report)
    parts = [_grid(v.comparison_header(), rows)] if rows else []
    notes = [*energy_changes(report), *report_notes(report)]
    parts.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    parts.append(f'<p class="muted">Workload fingerprint <code>{_e(report.fingerprint)}</code></p>')
    return "".join(parts)


def _logs(report: Report) -> str:
    logs = report.logs
    if not logs.found:
        return f"<p>{_e(logs.log_file)} not found.</p>"
    errors = "".join(f"<li><code>{_e(line)}</code></li>" for line in logs.errors_in_window[:20])
    counts = _pairs([("Warnings in window", str(len(logs.warnings_in_window))),
                     ("Errors in window", str(len(logs.errors_in_window)))])  # fmt: skip
    return counts + (f"<ul>{errors}</ul>" if errors else "")


def render_html(report: Report, records: Sequence[RequestRecord]) -> str:
    """The whole report as one HTML document (plots from ``records``)."""
    e = report.environment
    sections = [
        f"<h1>Benchmark report {_e(report.report_id)}</h1>",
        f'<p class="muted">{_e(report.timestamp)} &middot; model <b>{_e(e.served_model_name)}</b> &middot; '
        f"schema {_e(report.schema_version)}</p>",
        f"<blockquote>{_e(report.metrics.key_insight)}</blockquote>",
    ]
    if e.synthetic:
        sections.append(f'<blockquote class="warn">Synthetic model: {_e(e.synthetic_reason)}</blockquote>')
    sections += [f'<blockquote class="warn">{_e(note)}</blockquote>' for note in v.outcome_notes(report)]
    sections += ["<h2>Results</h2>", _pairs(v.headline_rows(report))]
    if report.metrics.turns:  # conversations: one row per turn index
        sections += ["<h2>Conversations: per turn</h2>", _grid(turn_header(), turn_rows(report))]
    sections += ["<h2>Comparison</h2>", _comparison(report)]
    sections += [
        "<h2>Latency</h2>",
        _figure("Latency CDF", lambda: latency_cdf_png(records)),
        "<h2>Throughput</h2>",
        _figure("Throughput over time", lambda: throughput_png(report.metrics.windows, report.metrics.steady)),
        f'<p class="muted">{_e(v.steady_caption(report))}</p>',
        "<h2>Resources</h2>",
        _figure("Memory over time", lambda: resources_png(report.resources.timeline)),
        _pairs(v.resources_rows(report)),
    ]
    for title, rows in energy_sections(report):
        sections += [f"<h2>{_e(title)}</h2>", _pairs(rows)]
    if report.errors.by_kind:
        sections += ["<h2>Errors</h2>", _pairs(v.error_rows(report))]
    if report.server is not None:
        verdict = verdict_text(report.server)
        sections += ["<h2>vLLM /metrics cross-check</h2>", f"<p>Client and server: {_e(verdict)}</p>"]
        sections += [f"<p>Client overhead: {_e(overhead_text(o))}</p>" for o in report.server.client_overhead]
        if report.server.client_overhead:
            sections.append(_grid(v.overhead_header(), v.overhead_rows(report.server)))
    if report.cluster is not None:  # engines behind vLLM's router: one row each
        sections += ["<h2>Replicas</h2>", *[f"<p>{_e(line)}</p>" for line in cluster_lines(report.cluster)]]
        sections.append(_grid(replica_header(), replica_rows(report.cluster)))
    environment = v.environment_rows(report.environment, report.resources.gpu_unavailable_reason)
    sections += ["<h2>Environment</h2>", _pairs(environment)]
    sections += ["<h2>Configuration</h2>", _pairs(v.config_rows(report.config)), "<h2>vLLM log</h2>", _logs(report)]
    markdown = f", {_e(report.markdown_file)}" if report.markdown_file else ""
    sections += [
        f'<p class="muted">Files: {_e(report.report_id)}.json, {_e(report.requests_file)}{markdown}</p>',
        f'<p class="muted">Compare with another run: <code>make compare A={_e(report.report_id)} B=…</code>, or the '
        "sidecar's <code>/compare</code> page (both curves and every difference side by side).</p>",
    ]
    return page(report.report_id, sections)


def page(title: str, sections: list[str]) -> str:
    """One self-contained HTML document of ``sections``."""
    body = "\n".join(sections)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def series_html(series: SeriesReport, sidecar_url: str | None = None) -> str:
    """The series report page: knee, point table, curves, comparisons, environment, configuration."""
    e = series.environment
    what = f"sweep {series.sweep}" if series.sweep else f"{series.repeat} runs of one point"
    sections = [
        f"<h1>Series report {_e(series.series_id)}</h1>",
        f'<p class="muted">{_e(series.timestamp)} &middot; model <b>{_e(e.served_model_name)}</b> &middot; {_e(what)}'
        f" &middot; {series.repeat} run(s) per point &middot; schema {_e(series.schema_version)}</p>",
        f"<blockquote>{_e(series.knee.line)}</blockquote>",
    ]
    sections += [f'<blockquote class="warn">{_e(n)}</blockquote>' for n in series.knee.notes]
    if e.synthetic:
        sections.append(f'<blockquote class="warn">Synthetic model: {_e(e.synthetic_reason)}</blockquote>')
    if series.interrupted:
        sections.append('<blockquote class="warn">Interrupted (Ctrl-C): the points measured so far.</blockquote>')
    header, rows = v.point_table(series)
    curve = Curve(series.series_id, series.points, series.knee.index)
    sections += [
        "<h2>Load points</h2>",
        _grid(header, rows),
        f'<p class="muted">Means over runs ± half width of the 95% confidence interval ({_e(series.interval_method)}). '
        + (f"SLO: {_e(slo_text(series.slo, series.slo_attainment_pct))}. " if series.slo else "No SLO given. ")
        + "Runs: "
        + ", ".join(f'<a href="{_e(i)}.html">{_e(i)}</a>' for p in series.points for i in p.report_ids)
        + "</p>",
        "<h2>Latency against load</h2>",
        _figure("Latency against load", lambda: latency_curves_png([curve])),
        "<h2>Goodput against load</h2>",
        _figure("Goodput against load", lambda: goodput_png([curve])),
    ]
    if series.comparison:
        sections.append("<h2>Comparison</h2>")
        for name, comparison in series.comparison.items():
            sections.append(f"<h3>{_e(name)} ({_e(comparison.against)})</h3>")
            if comparison.refused:
                sections.append(f"<p>Not compared: {_e(comparison.refused)}</p>")
            else:
                sections.append(_grid(*v.change_table(comparison.points)))
            sections += [f'<p class="muted">{_e(n)}</p>' for n in comparison.notes]
    sections += [f"<p>{_e(n)}</p>" for n in series.notes]
    sections += ["<h2>Environment</h2>", _pairs(v.environment_rows(series.environment))]
    sections += ["<h2>Configuration (the plan every point started from)</h2>", _pairs(v.config_rows(series.config))]
    form = f'<a href="{_e(sidecar_url)}/compare?a={_e(series.series_id)}">compare page</a>'
    link = f" or the sidecar's {form}" if sidecar_url else ""
    sections.append(f'<p class="muted">Compare with another result: <code>make compare A={_e(series.series_id)} '
                    f"B=…</code>{link}.</p>")  # fmt: skip
    return page(series.series_id, sections)


def compare_html(comparison: ABComparison) -> str:
    """The comparison page: what differs first, then the overlaid curves, then the changes point by point."""
    a, b = comparison.a, comparison.b
    diffs = [[d.group, d.field, str(d.a), str(d.b)] for d in comparison.differences]
    curves = [Curve(f"A {a.ref}", a.points, a.knee.index if a.knee else None),
              Curve(f"B {b.ref}", b.points, b.knee.index if b.knee else None)]
    sections = [
        f"<h1>A/B comparison {_e(comparison.compare_id)}</h1>",
        f"<p>A: {_e(v.side_line(a))}<br>B: {_e(v.side_line(b))}</p>",
        "<h2>What differs</h2>",
        _grid(["group", "field", "A", "B"], diffs) if diffs else "<p>No configuration field differs.</p>",
        "<h2>Latency against load</h2>",
        _figure("Latency against load", lambda: latency_curves_png(curves)),
        "<h2>Goodput against load</h2>",
        _figure("Goodput against load", lambda: goodput_png(curves)),
        "<h2>B against A, point by point</h2>",
        _grid(*v.change_table(comparison.points)) if comparison.points else "<p>No paired point.</p>",
        f'<p class="muted">A change whose 95% interval holds 0 is "no significant change"; a worse change whose whole '
        f"interval lies beyond {comparison.threshold_pct:g}% is a regression.</p>",
        *(f"<p>{_e(n)}</p>" for n in comparison.notes),
    ]
    return page(comparison.compare_id, sections)


def compare_form(choices: list[str], chosen: str | None) -> str:
    """The ``GET /compare`` form: two lists of ``choices`` (names and ids), A preselected to ``chosen``."""

    def select(field: str, selected: str | None) -> str:
        options = "".join(f'<option value="{_e(c)}"{" selected" if c == selected else ""}>{_e(c)}</option>'
                          for c in choices)  # fmt: skip
        return f'<label>{field.upper()} <select name="{field}">{options}</select></label> '

    return page("Compare", [
        '<h1>Compare two results</h1><form method="get" action="/compare">'
        f'{select("a", chosen)}{select("b", None)}<button type="submit">Compare B with A</button></form>',
        '<p class="muted">Baseline names, series and reports. The same comparison from a shell: '
        "<code>make compare A=… B=…</code> (also written to reports/).</p>",
    ])  # fmt: skip
