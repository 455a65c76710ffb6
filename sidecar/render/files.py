"""The files written beside each result's JSON, from its final version."""

from __future__ import annotations

from collections.abc import Sequence

from core.comparison import ABComparison
from core.records import RequestRecord
from core.report_schema import Report
from core.series_stats import SeriesReport
from sidecar.render.csv_files import rows_csv, summary_csv
from sidecar.render.html_page import compare_html, render_html, series_html
from sidecar.render.markdown_page import compare_markdown, render_markdown, series_markdown


def report_files(report: Report, records: Sequence[RequestRecord]) -> dict[str, str]:
    """The Markdown summary, the self-contained HTML report and the CSV exports of ``report``."""
    return {
        ".md": render_markdown(report),
        ".html": render_html(report, records),
        ".csv": rows_csv(records),
        ".summary.csv": summary_csv(report),
    }


def series_files(series: SeriesReport, sidecar_url: str | None = None) -> dict[str, str]:
    """The Markdown and HTML written beside a series' JSON."""
    return {".md": series_markdown(series), ".html": series_html(series, sidecar_url)}


def compare_files(comparison: ABComparison) -> dict[str, str]:
    """The Markdown and HTML written beside a comparison's JSON."""
    return {".md": compare_markdown(comparison), ".html": compare_html(comparison)}
