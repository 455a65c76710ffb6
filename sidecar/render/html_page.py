"""The HTML writer of the page sections (``page_sections``): self-contained pages, plots as base64 PNGs, no external
resources, every value HTML-escaped."""

from __future__ import annotations

import base64
import html
import logging
from collections.abc import Callable, Sequence

from core.comparison import ABComparison
from core.records import RequestRecord
from core.report_schema import Report
from sidecar.render.page_sections import Block, Plot, Section, Table, compare_sections, inline, report_sections

log = logging.getLogger(__name__)
STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:62em;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.15em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left;
vertical-align:top}th{background:#f5f5f5}blockquote{background:#f0f6ff;margin:1em 0;padding:.6em 1em;
border-left:4px solid #4a90d9}.warn{background:#fff4e5;border-left-color:#e69500}img{max-width:100%}
.muted{color:#777}code{font-size:.9em}
"""
PARA_TAGS = {"quote": ("blockquote", ""), "warn": ("blockquote", ' class="warn"'), "muted": ("p", ' class="muted"'),
             "bullets": ("li", ""), "": ("p", "")}  # fmt: skip
MARKS = {"b": "<b>{text}</b>", "code": "<code>{text}</code>", "a": '<a href="{href}">{text}</a>'}


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _table(header: Sequence[str] | None, rows: Sequence[Sequence[str]]) -> str:
    if header is None:  # (item, value) pairs
        return "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows) + "</table>"
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


def _block(block: Block) -> str:
    if isinstance(block, Table):
        return _table(block.header, block.rows)
    if isinstance(block, Plot):
        return _figure(block.title, block.draw)
    tag, attributes = PARA_TAGS[block.style]
    items = "".join(f"<{tag}{attributes}>{inline(item, MARKS, _e)}</{tag}>" for item in block.items)
    return f"<ul>{items}</ul>" if block.style == "bullets" and items else items


def write_html(sections: Sequence[Section]) -> str:
    """The sections as one self-contained HTML document, titled by the first."""
    body = [f"<h{s.level}>{_e(s.title)}</h{s.level}>" + "".join(_block(b) for b in s.blocks) for s in sections]
    return page(sections[0].title, body)


def render_html(report: Report, records: Sequence[RequestRecord]) -> str:
    """The whole report as one HTML document (plots from ``records``)."""
    return write_html(report_sections(report, records))


def compare_html(comparison: ABComparison) -> str:
    """The comparison page: what differs first, then the overlaid curves, then the changes point by point."""
    return write_html(compare_sections(comparison))


def page(title: str, sections: list[str]) -> str:
    """One self-contained HTML document of ``sections``."""
    body = "\n".join(sections)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


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
