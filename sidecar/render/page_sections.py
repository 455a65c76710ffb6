"""The sections of a run's, a series' and an A/B comparison's page, decided once as neutral blocks (headed text,
tables, notes, plots) that ``pages`` only lays out as Markdown and HTML."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from core.comparison import ABComparison, report_notes
from core.records import RequestRecord
from core.report_schema import Report
from core.series_stats import SeriesReport, slo_text
from core.serverview import overhead_text, verdict_text
from sidecar.render import view_rows as v
from sidecar.render.cells import Row
from sidecar.render.energy_rows import energy_changes, energy_sections
from sidecar.render.plots import Curve, goodput_png, latency_cdf_png, latency_curves_png, resources_png, throughput_png


@dataclass(frozen=True)
class Mark:
    """Inline markup: ``kind`` ``b`` (bold), ``code`` or ``a`` (a link to ``href``, else to ``text``)."""

    kind: str
    text: str
    href: str = ""


Inline = str | tuple[str | Mark, ...]
bold = partial(Mark, "b")
code = partial(Mark, "code")


def inline(text: Inline, marks: dict[str, str], escape: Callable[[str], str] = str) -> str:
    """``text`` with each :class:`Mark` written by its template in ``marks`` (``{text}``, ``{href}``), escaped."""
    pieces = (text,) if isinstance(text, str) else text
    return "".join(
        escape(p) if isinstance(p, str) else marks[p.kind].format(text=escape(p.text), href=escape(p.href or p.text))
        for p in pieces
    )


@dataclass(frozen=True)
class Paras:
    """Paragraphs, or one list when ``style`` is ``bullets``; ``quote`` / ``warn``: call-outs, ``muted``: asides."""

    items: Sequence[Inline]
    style: str = ""


@dataclass(frozen=True)
class Table:
    """A table with ``header`` over ``rows``; no header: ``(item, value)`` pairs."""

    header: Sequence[str] | None
    rows: Sequence[Sequence[str]]


@dataclass(frozen=True)
class Plot:
    """A PNG drawn on demand (None: no data); pages without images leave it out."""

    title: str
    draw: Callable[[], bytes | None]


Block = Paras | Table | Plot


@dataclass(frozen=True)
class Section:
    """A heading (``level`` 1: the page's title) and its blocks."""

    title: str
    blocks: list[Block] = field(default_factory=list)
    level: int = 2


def _pairs(title: str, rows: Sequence[Row]) -> Section:
    return Section(title, [Table(None, rows)])


def _compare_hint(ref: str, what: str, *link: str | Mark) -> Paras:
    tail = (", or the sidecar's ", *link) if link else ()
    return Paras([(f"Compare with another {what}: ", code(f"make compare A={ref} B=…"), *tail, ".")], "muted")


def report_sections(report: Report, records: Sequence[RequestRecord]) -> list[Section]:
    """A run's page (plots from ``records``)."""
    e, m, server, cluster, logs = report.environment, report.metrics, report.server, report.cluster, report.logs
    synthetic = [(bold("Synthetic model"), f": {e.synthetic_reason}")] if e.synthetic else []
    compared = v.comparison_rows(report)
    sections = [
        Section(f"Benchmark report {report.report_id}", [
            Paras([(f"{report.timestamp} · model ", bold(e.served_model_name or "unknown"),
                    f" · schema {report.schema_version}")], "muted"),
            Paras([m.key_insight], "quote"),
            Paras([*synthetic, *((bold(note),) for note in v.outcome_notes(report))], "warn"),
        ], 1),
        _pairs("Results", v.headline_rows(report)),
    ]  # fmt: skip
    if m.turns:  # conversations: one row per turn index
        sections.append(Section("Conversations: per turn", [Table(v.TURN_HEADER, v.turn_rows(report))]))
    sections += [
        Section("Comparison", [
            *([Table(v.COMPARISON_HEADER, compared)] if compared else []),
            Paras([*energy_changes(report), *report_notes(report),
                   ("workload fingerprint: ", code(f"{report.fingerprint}"))], "bullets"),
        ]),
        Section("Latency", [Plot("Latency CDF", lambda: latency_cdf_png(records))]),
        Section("Throughput", [Plot("Throughput over time", lambda: throughput_png(m.windows, m.steady)),
                               Paras([v.steady_caption(report)], "muted")]),
        Section("Resources", [Plot("Memory over time", lambda: resources_png(report.resources.timeline)),
                              Table(None, v.resources_rows(report))]),
        *(_pairs(title, rows) for title, rows in energy_sections(report)),
    ]  # fmt: skip
    if report.errors.by_kind:
        sections.append(_pairs("Errors", v.error_rows(report)))
    if server is not None:
        lines = [f"Client and server: {verdict_text(server)}"]
        lines += [f"Client overhead: {overhead_text(o)}" for o in server.client_overhead]
        table = [Table(v.OVERHEAD_HEADER, v.overhead_rows(server))] if server.client_overhead else []
        sections.append(Section("vLLM /metrics cross-check", [Paras(lines), *table]))
    if cluster is not None:  # engines behind vLLM's router: one row each
        sections.append(Section("Replicas", [Paras(v.cluster_lines(cluster), "bullets"),
                                             Table(v.REPLICA_HEADER, v.replica_rows(cluster))]))  # fmt: skip
    counts = [("Warnings in window", str(len(logs.warnings_in_window))),
              ("Errors in window", str(len(logs.errors_in_window)))]  # fmt: skip
    files: list[Inline] = [("JSON: ", code(f"{report.report_id}.json")),
                           ("per-request rows: ", code(report.requests_file))]  # fmt: skip
    if report.markdown_file:
        files.append(("Markdown: ", code(report.markdown_file)))
    if report.html_file:
        files.append(("HTML with plots: ", Mark("a", report.html_file)))
    errors = Paras([(code(line),) for line in logs.errors_in_window[:20]], "bullets")
    return [
        *sections,
        _pairs("Environment", v.environment_rows(e, report.resources.gpu_unavailable_reason)),
        _pairs("Configuration", v.config_rows(report.config)),
        Section("vLLM log", [Table(None, counts), errors] if logs.found else [Paras([f"{logs.log_file} not found."])]),
        Section("Files", [Paras(files, "bullets"), _compare_hint(
            report.report_id, "run", code("/compare"), " page (both curves and every difference side by side)")]),
    ]  # fmt: skip


def series_sections(series: SeriesReport, sidecar_url: str | None = None) -> list[Section]:
    """A series' page: knee, point table, curves, comparisons, environment, configuration."""
    e = series.environment
    what = f"sweep {series.sweep}" if series.sweep else f"{series.repeat} runs of one point"
    synthetic = [(bold("Synthetic model"), f": {e.synthetic_reason}")] if e.synthetic else []
    interrupted = ["Interrupted (Ctrl-C): the points measured so far."] if series.interrupted else []
    slo = f"SLO: {slo_text(series.slo, series.slo_attainment_pct)}. " if series.slo else "No SLO given. "
    ids = [i for p in series.points for i in p.report_ids]
    runs = [piece for i in ids for piece in (", ", Mark("a", i, f"{i}.html"))][1:]
    sections = [
        Section(f"Series report {series.series_id}", [
            Paras([(f"{series.timestamp} · model ", bold(f"{e.served_model_name}"), f" · {what} · {series.repeat} "
                    f"run(s) per point · schema {series.schema_version}")], "muted"),
            Paras([series.knee.line], "quote"),
            Paras([*series.knee.notes, *synthetic, *interrupted], "warn"),
        ], 1),
        Section("Load points", [
            Table(*v.point_table(series)),
            Paras([(f"Means over runs ± half width of the 95% confidence interval ({series.interval_method}). "
                    f"{slo}Runs: ", *runs)], "muted"),
            Paras(series.notes, "bullets"),
        ]),
        *_curves([Curve(series.series_id, series.points, series.knee.index)]),
    ]  # fmt: skip
    if series.comparison:
        sections.append(Section("Comparison"))
    for name, c in series.comparison.items():
        shown: Block = Paras([f"Not compared: {c.refused}"]) if c.refused else Table(*v.change_table(c.points))
        sections.append(Section(f"{name} ({c.against})", [shown, Paras(c.notes, "muted")], 3))
    link = [Mark("a", "compare page", f"{sidecar_url}/compare?a={series.series_id}")] if sidecar_url else []
    html = [("HTML with plots: ", Mark("a", series.html_file))] if series.html_file else []
    return [
        *sections,
        _pairs("Environment", v.environment_rows(e)),
        _pairs("Configuration (the plan every point started from)", v.config_rows(series.config)),
        Section("Files", [Paras(html, "bullets"), _compare_hint(series.series_id, "result", *link)]),
    ]


def _curves(curves: list[Curve]) -> list[Section]:
    return [Section("Latency against load", [Plot("Latency against load", lambda: latency_curves_png(curves))]),
            Section("Goodput against load", [Plot("Goodput against load", lambda: goodput_png(curves))])]  # fmt: skip


def compare_sections(comparison: ABComparison) -> list[Section]:
    """An A/B comparison's page: what differs first, then the overlaid curves, then the changes point by point."""
    a, b = comparison.a, comparison.b
    diffs = [[d.group, d.field, str(d.a), str(d.b)] for d in comparison.differences]
    curves = [Curve(f"A {a.ref}", a.points, a.knee.index if a.knee else None),
              Curve(f"B {b.ref}", b.points, b.knee.index if b.knee else None)]  # fmt: skip
    threshold = (f'A change whose 95% interval holds 0 is "no significant change"; a worse change whose whole '
                 f"interval lies beyond {comparison.threshold_pct:g}% is a regression.")  # fmt: skip
    return [
        Section(f"A/B comparison {comparison.compare_id}",
                [Paras([f"A: {v.side_line(a)}", f"B: {v.side_line(b)}"], "bullets")], 1),
        Section("What differs", [Table(["group", "field", "A", "B"], diffs) if diffs else
                                 Paras(["No configuration field differs."])]),
        *_curves(curves),
        Section("B against A, point by point", [
            Table(*v.change_table(comparison.points)) if comparison.points else Paras(["No paired point."]),
            Paras([threshold], "muted"),
            Paras(comparison.notes, "bullets"),
        ]),
    ]  # fmt: skip
