"""Series reports and A/B comparisons as self-contained HTML (plots inline) and Markdown (pure apart from drawing).

The HTML pages link each run's own report (``<report id>.html`` beside them) and say how to compare with another
result (``make compare``, or the sidecar's ``/compare`` page, which renders the same comparison page on demand).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from core.abcompare import ABComparison, Side
from core.intervals import Interval, change_text
from core.report_schema import BenchmarkConfig
from core.series import SERIES_METRICS, PointComparison, SeriesReport, slo_text
from sidecar.render.html_page import STYLE, _e, _figure, _grid, _pairs
from sidecar.render.markdown_page import table
from sidecar.render.series_plots import Curve, goodput_png, latency_curves_png

POINT_METRICS = (
    "throughput_req_per_sec",
    "output_tokens_per_sec",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "goodput_percent",
)


def cell(iv: Interval | None) -> str:
    """``1.52 ± 0.08`` (95 % half width) or the single run's value; ``n/a``."""
    if iv is None:
        return "n/a"
    digits = 2 if abs(iv.mean) < 10 else 0
    return f"{iv.mean:.{digits}f}" + ("" if iv.half_width is None else f" ± {iv.half_width:.{digits}f}")


def point_table(series: SeriesReport) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the load points: label, runs, the metrics' means ± half widths, SLO verdict, reports."""
    header = ["point", "runs", *(f"{SERIES_METRICS[m][0]} ({SERIES_METRICS[m][1]})" for m in POINT_METRICS), "SLO"]
    rows = []
    for p in series.points:
        slo = "n/a" if p.meets_slo is None else ("meets" if p.meets_slo else "misses")
        rows.append([p.label, str(len(p.report_ids)), *(cell(p.metrics.get(m)) for m in POINT_METRICS), slo])
    return header, rows


def change_table(points: Sequence[PointComparison]) -> tuple[list[str], list[list[str]]]:
    """One row per paired point and metric: reference, this, the change with its interval and the verdict."""
    header = ["point", "against", "metric", "change [95% CI]"]
    rows = [
        [p.label, p.against_label, SERIES_METRICS[m][0], change_text(change)]
        for p in points
        for m, change in p.changes.items()
        if change.change_pct is not None
    ]
    return header, rows


def _page(title: str, sections: list[str]) -> str:
    body = "\n".join(sections)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def _compare_hint(result_id: str, sidecar_url: str | None) -> str:
    page = f'<a href="{_e(sidecar_url)}/compare?a={_e(result_id)}">compare page</a>'
    link = f" or the sidecar's {page}" if sidecar_url else ""
    return f'<p class="muted">Compare with another result: <code>make compare A={_e(result_id)} B=…</code>{link}.</p>'


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
    header, rows = point_table(series)
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
                sections.append(_grid(*change_table(comparison.points)))
            sections += [f'<p class="muted">{_e(n)}</p>' for n in comparison.notes]
    sections += [f"<p>{_e(n)}</p>" for n in series.notes]
    sections += ["<h2>Environment</h2>", _pairs(environment_rows(series))]
    sections += ["<h2>Configuration (the plan every point started from)</h2>", _pairs(config_rows(series.config))]
    sections.append(_compare_hint(series.series_id, sidecar_url))
    return _page(series.series_id, sections)


def environment_rows(series: SeriesReport | Side) -> list[tuple[str, str]]:
    """Model, vLLM (version and command line), hardware."""
    e = series.environment
    gpu = f"{e.gpu_count} x {e.gpu_model}" if e.gpu_model else "none"
    return [
        ("Model", f"{e.served_model_name} from {e.model_path}"),
        ("vLLM", f"{e.vllm_version} ({e.vllm_fingerprint})"),
        ("vLLM command line", " ".join(e.vllm_args) or "n/a"),
        ("GPU", gpu),
        ("CPU", f"{e.cpu_model}, {e.cpu_cores} cores, {e.ram_total_gb} GB RAM"),
        ("Project", f"{e.project_version} at {e.project_git_commit}"),
    ]


def config_rows(config: BenchmarkConfig) -> list[tuple[str, str]]:
    """Every knob of a plan that is set."""
    return [(k, str(v)) for k, v in config.model_dump().items() if v not in (None, {}, [])]


def series_markdown(series: SeriesReport) -> str:
    """The series report as Markdown: knee, the point table, comparisons."""
    lines = [f"# Series report {series.series_id}", "", f"> {series.knee.line}", ""]
    lines += [f"> {n}" for n in series.knee.notes]
    header, rows = point_table(series)
    lines += ["## Load points", "", *table(header, rows), "", f"Means ± 95% CI half width ({series.interval_method})."]
    for name, comparison in series.comparison.items():
        lines += ["", f"## {name} ({comparison.against})", ""]
        if comparison.refused:
            lines.append(f"Not compared: {comparison.refused}")
        else:
            lines += table(*change_table(comparison.points))
    lines += ["", *(f"- {n}" for n in series.notes)]
    if series.html_file:
        lines += ["", f"HTML with plots: [{series.html_file}]({series.html_file})"]
    return "\n".join(lines) + "\n"


def series_files(series: SeriesReport, sidecar_url: str | None = None) -> dict[str, str]:
    """The Markdown and HTML written beside a series' JSON."""
    return {".md": series_markdown(series), ".html": series_html(series, sidecar_url)}


def _side_line(side: Side) -> str:
    e = side.environment
    shape = f"{len(side.points)} point(s) x {side.repeat} run(s)"
    return f"{side.ref} = {side.id} ({side.kind}, {shape}, {e.served_model_name})"


def compare_html(comparison: ABComparison) -> str:
    """The comparison page: what differs first, then the overlaid curves, then the changes point by point."""
    a, b = comparison.a, comparison.b
    diffs = [[d.group, d.field, str(d.a), str(d.b)] for d in comparison.differences]
    curves = [Curve(f"A {a.ref}", a.points, a.knee.index if a.knee else None),
              Curve(f"B {b.ref}", b.points, b.knee.index if b.knee else None)]
    sections = [
        f"<h1>A/B comparison {_e(comparison.compare_id)}</h1>",
        f"<p>A: {_e(_side_line(a))}<br>B: {_e(_side_line(b))}</p>",
        "<h2>What differs</h2>",
        _grid(["group", "field", "A", "B"], diffs) if diffs else "<p>No configuration field differs.</p>",
        "<h2>Latency against load</h2>",
        _figure("Latency against load", lambda: latency_curves_png(curves)),
        "<h2>Goodput against load</h2>",
        _figure("Goodput against load", lambda: goodput_png(curves)),
        "<h2>B against A, point by point</h2>",
        _grid(*change_table(comparison.points)) if comparison.points else "<p>No paired point.</p>",
        f'<p class="muted">A change whose 95% interval holds 0 is "no significant change"; a worse change whose whole '
        f"interval lies beyond {comparison.threshold_pct:g}% is a regression.</p>",
        *(f"<p>{_e(n)}</p>" for n in comparison.notes),
    ]
    return _page(comparison.compare_id, sections)


def compare_markdown(comparison: ABComparison) -> str:
    """The comparison as Markdown."""
    diffs = [[d.group, d.field, str(d.a), str(d.b)] for d in comparison.differences]
    lines = [f"# A/B comparison {comparison.compare_id}", "", f"- A: {_side_line(comparison.a)}",
             f"- B: {_side_line(comparison.b)}", "", "## What differs", ""]
    lines += table(["group", "field", "A", "B"], diffs) if diffs else ["No configuration field differs."]
    lines += ["", "## B against A", "", *table(*change_table(comparison.points)), ""]
    lines += [f"- {n}" for n in comparison.notes]
    return "\n".join(lines) + "\n"


def compare_files(comparison: ABComparison) -> dict[str, str]:
    """The Markdown and HTML written beside a comparison's JSON."""
    return {".md": compare_markdown(comparison), ".html": compare_html(comparison)}


def compare_form(choices: list[str], chosen: str | None) -> str:
    """The ``GET /compare`` page without A and B: two lists of ``choices`` (baseline names, series and report ids,
    newest first) to compare, A preselected to ``chosen``."""

    def select(field: str, selected: str | None) -> str:
        options = "".join(
            f'<option value="{html.escape(v)}"{" selected" if v == selected else ""}>{html.escape(v)}</option>'
            for v in choices
        )
        return f'<label>{field.upper()} <select name="{field}">{options}</select></label> '

    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Compare</title><style>{STYLE}</style>'
        "</head><body><h1>Compare two results</h1><form method=\"get\" action=\"/compare\">"
        f'{select("a", chosen)}{select("b", None)}<button type="submit">Compare B with A</button></form>'
        '<p class="muted">Baseline names, series and reports. The same comparison from a shell: '
        "<code>make compare A=… B=…</code> (also written to reports/).</p></body></html>"
    )
