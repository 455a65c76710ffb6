"""The pages of a run, a series and an A/B comparison, laid out from their sections (``page_sections``): Markdown (no
plots) and self-contained HTML (plots as base64 PNGs, no external resources, every value HTML-escaped); and the files
written beside each result's JSON from its final version: the pages (sections built once) and, for a run, the CSV
exports ``<id>.csv`` (one row per request, ITL as count, mean and max ms) and ``<id>.summary.csv`` (the headline
figures in one row, names as in the JSON)."""

from __future__ import annotations

import base64
import csv
import html
import io
import logging
from collections.abc import Callable, Sequence
from statistics import fmean
from typing import Any

from core.comparison import ABComparison
from core.records import RequestRecord
from core.report_schema import Report
from core.series_stats import SeriesReport
from sidecar.render.page_sections import (
    Block,
    Paras,
    Plot,
    Section,
    Table,
    compare_sections,
    inline,
    report_sections,
    series_sections,
)

log = logging.getLogger(__name__)
ROW_COLUMNS = (
    "request_id", "phase", "started_at", "scheduled_at", "task", "input_bucket", "ok", "error_kind", "error",
    "http_status", "ttft_ms", "e2e_ms", "tpot_ms", "itl_count", "itl_mean_ms", "itl_max_ms", "queue_delay_ms",
    "prompt_tokens", "output_tokens", "output_tokens_source", "content_chunks", "max_tokens", "finish_reason",
    "end_reason"
)  # fmt: skip
REASONING_COLUMNS = ("reasoning_ttft_ms", "answer_ttft_ms", "reasoning_tokens", "answer_tokens",
                     "reasoning_tokens_source")
"""Columns added after ``ttft_ms``'s group when a row carried reasoning (the answer's first token beside TTFT)."""
SESSION_COLUMNS = ("session_id", "turn", "think_time_s", "cached_tokens")
"""Columns added when a row belongs to a conversation (or the server reported cached prompt tokens)."""
SUMMARY_METRICS = (
    "requests_total", "requests_ok", "requests_failed", "requests_incomplete", "error_rate_percent", "duration_s",
    "throughput_req_per_sec", "output_tokens_per_sec", "total_tokens_per_sec", "latency_avg_ms", "latency_p50_ms",
    "latency_p90_ms", "latency_p99_ms", "ttft_p50_ms", "ttft_p99_ms", "goodput_req_per_sec", "gpu_mem_peak_gb",
    "vllm_rss_peak_gb", "energy_j", "power_w_mean", "idle_power_w", "energy_j_per_output_token",
    "energy_j_per_request", "output_tokens_per_j", "cost_usd_per_1m_output_tokens", "cost_usd_per_1m_total_tokens",
    "energy_cost_usd_per_1m_output_tokens", "energy_cost_usd_per_1m_total_tokens"
)  # fmt: skip
MD_MARKS = {"b": "**{text}**", "code": "`{text}`", "a": "[{text}]({href})"}
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
HTML_MARKS = {"b": "<b>{text}</b>", "code": "<code>{text}</code>", "a": '<a href="{href}">{text}</a>'}


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _html_table(header: Sequence[str] | None, rows: Sequence[Sequence[str]]) -> str:
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


def _html_block(block: Block) -> str:
    if isinstance(block, Table):
        return _html_table(block.header, block.rows)
    if isinstance(block, Plot):
        return _figure(block.title, block.draw)
    tag, attributes = PARA_TAGS[block.style]
    items = "".join(f"<{tag}{attributes}>{inline(item, HTML_MARKS, _e)}</{tag}>" for item in block.items)
    return f"<ul>{items}</ul>" if block.style == "bullets" and items else items


def write_html(sections: Sequence[Section]) -> str:
    """The sections as one self-contained HTML document, titled by the first."""
    body = [f"<h{s.level}>{_e(s.title)}</h{s.level}>" + "".join(_html_block(b) for b in s.blocks) for s in sections]
    return page(sections[0].title, body)


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


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A GitHub-flavoured Markdown table (pipes in cells escaped)."""
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _md_block(block: Paras | Table) -> list[str]:
    if isinstance(block, Table):
        return table(block.header or ["Item", "Value"], block.rows)
    if block.style == "bullets":
        return [f"- {inline(item, MD_MARKS)}" for item in block.items]
    prefix = "> " if block.style in ("quote", "warn") else ""
    return [line for item in block.items for line in ("", prefix + inline(item, MD_MARKS))][1:]


def write_markdown(sections: Sequence[Section]) -> str:
    """The sections as one Markdown document; a section of plots only is left out."""
    lines: list[str] = []
    for s in sections:
        blocks = [_md_block(b) for b in s.blocks if not isinstance(b, Plot)]
        if s.blocks and not blocks:
            continue
        lines += ["#" * s.level + f" {s.title}", ""]
        lines += [line for block in blocks if block for line in [*block, ""]]
    return "\n".join(lines).rstrip("\n") + "\n"


def _csv_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(["" if v is None else v for v in row] for row in rows)
    return out.getvalue()


def row_columns(records: Sequence[RequestRecord]) -> tuple[str, ...]:
    """:data:`ROW_COLUMNS`, plus :data:`REASONING_COLUMNS` / :data:`SESSION_COLUMNS` when some row has them."""
    columns: tuple[str, ...] = ROW_COLUMNS
    if any(r.reasoning_ttft_ms is not None or r.reasoning_tokens for r in records):
        at = columns.index("ttft_ms") + 1
        columns = (*columns[:at], *REASONING_COLUMNS, *columns[at:])
    if any(r.session_id is not None or r.cached_tokens is not None for r in records):
        columns = (*columns, *SESSION_COLUMNS)
    return columns


def rows_csv(records: Sequence[RequestRecord]) -> str:
    """One CSV row per request (warmup rows included, told apart by ``phase``)."""
    columns = row_columns(records)
    rows = []
    for r in records:
        values = r.model_dump() | {
            "tpot_ms": r.tpot_ms,
            "itl_count": len(r.itl_ms),
            "itl_mean_ms": fmean(r.itl_ms) if r.itl_ms else None,
            "itl_max_ms": max(r.itl_ms) if r.itl_ms else None,
            "queue_delay_ms": r.queue_delay_ms,
        }
        rows.append([values.get(column) for column in columns])
    return _csv_table(columns, rows)


def summary_csv(report: Report) -> str:
    """One CSV row: report id, time, model, the load shape and the headline metrics."""
    m = report.metrics
    header = ["report_id", "timestamp", "model", "mode", "concurrency", "rate_req_per_sec", *SUMMARY_METRICS]
    config = report.config
    row = [report.report_id, report.timestamp, config.model, config.mode, config.concurrency, config.rate_req_per_sec]
    row += [getattr(m, name) for name in SUMMARY_METRICS]
    if m.reasoning is not None:  # reasoning streams: the answer's first token beside TTFT
        r = m.reasoning
        header += ["answer_ttft_p50_ms", "answer_ttft_p99_ms", "reasoning_ttft_p50_ms", "think_p50_ms",
                   "reasoning_tokens_mean", "answer_tokens_mean"]  # fmt: skip
        row += [r.answer_ttft.p50_ms, r.answer_ttft.p99_ms, r.reasoning_ttft.p50_ms, r.think.p50_ms,
                r.reasoning_tokens_mean, r.answer_tokens_mean]  # fmt: skip
    if m.sessions is not None:
        header += ["sessions", "session_total_p50_ms", "session_total_p99_ms", "session_cache_hit_percent"]
        row += [m.sessions.sessions, m.sessions.total.p50_ms, m.sessions.total.p99_ms, m.sessions.cache_hit_percent]
    return _csv_table(header, [row])


def _pages(sections: Sequence[Section]) -> dict[str, str]:
    return {".md": write_markdown(sections), ".html": write_html(sections)}


def report_files(report: Report, records: Sequence[RequestRecord]) -> dict[str, str]:
    """The Markdown summary, the self-contained HTML report and the CSV exports of ``report``."""
    return {**_pages(report_sections(report, records)), ".csv": rows_csv(records), ".summary.csv": summary_csv(report)}


def series_files(series: SeriesReport, sidecar_url: str | None = None) -> dict[str, str]:
    """The Markdown and HTML written beside a series' JSON."""
    return _pages(series_sections(series, sidecar_url))


def compare_files(comparison: ABComparison) -> dict[str, str]:
    """The Markdown and HTML written beside a comparison's JSON."""
    return _pages(compare_sections(comparison))
