"""The files written beside each result's JSON, from its final version: each page's sections built once, written
as Markdown and HTML."""

from __future__ import annotations

from collections.abc import Sequence

from core.comparison import ABComparison
from core.records import RequestRecord
from core.report_schema import Report
from core.series_stats import SeriesReport
from sidecar.render.csv_files import rows_csv, summary_csv
from sidecar.render.html_page import write_html
from sidecar.render.markdown_page import write_markdown
from sidecar.render.page_sections import Section, compare_sections, report_sections, series_sections


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
