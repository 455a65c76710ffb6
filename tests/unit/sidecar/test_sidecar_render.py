"""Markdown and HTML renderings of a report, plots, and secret redaction helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.intervals import Comparison
from core.records import RequestRecord
from core.redact import Redactor, secret_values, strip_url_credentials
from core.report_schema import Environment, ErrorSummary, ResourcePoint
from core.settings import Settings
from sidecar.render.page_sections import report_sections
from sidecar.render.pages import table, write_html, write_markdown
from sidecar.render.plots import latency_cdf_png, resources_png, throughput_png
from tests.unit.sidecar.test_sidecar_store import report, single_run

PNG = b"\x89PNG\r\n\x1a\n"


def rows() -> list[RequestRecord]:
    return [
        RequestRecord(request_id=f"r{i}", started_at=float(i), ok=True, ttft_ms=10.0 + i, e2e_ms=100.0 + i)
        for i in range(20)
    ]


def test_markdown_has_results_comparison_and_environment() -> None:
    """The Markdown summary carries the headline table, the comparison table with percents and the notes."""
    r = report().model_copy(
        update={
            "comparison": {
                "vs_v0.2.1": single_run("benchmark_report_20250101_000000",
                                        {"throughput_req_per_sec": 12.0, "e2e_p99_ms": -3.0}),
                "vs_old": Comparison(refused="workload differs"),
            },
            "html_file": "x.html",
        }
    )
    text = write_markdown(report_sections(r, []))
    assert "| Throughput | 2.00 req/s |" in text
    assert "| vs_v0.2.1 | benchmark_report_20250101_000000 | +12% | n/a | n/a | -3.0% |" in text
    assert "- vs_old: not compared: workload differs" in text and "[x.html](x.html)" in text


def test_error_rate_column_shows_both_rates_and_the_change_in_points() -> None:
    """An error rate 0 -> 0 reads ``0.0 → 0.0 (=)`` (a percent change of 0 is undefined, not "n/a"); a rise reads
    in percentage points; a comparison without the figure is ``n/a``."""
    r = report()
    rate = r.metrics.error_rate_percent
    assert rate is not None
    r = r.model_copy(
        update={
            "comparison": {
                "vs_a": single_run("benchmark_report_20250101_000000", {}, (rate, rate)),
                "vs_b": single_run("benchmark_report_20250101_000001", {}, (rate - 2.5, rate)),
                "vs_c": single_run("benchmark_report_20250101_000002", {}),
            }
        }
    )
    rows = [line for line in write_markdown(report_sections(r, [])).splitlines() if line.startswith("| vs_")]
    assert rows[0].endswith(f"| {rate:.1f} → {rate:.1f} (=) |"), rows[0]
    assert rows[1].endswith(f"| {rate - 2.5:.1f} → {rate:.1f} (+2.5 pp) |"), rows[1]
    assert rows[2].endswith("| n/a |")


def test_markdown_table_escapes_pipes() -> None:
    """A pipe inside a cell cannot break the table."""
    assert table(["a"], [["x|y"]])[-1] == "| x\\|y |"


def test_html_escapes_values_and_embeds_plots() -> None:
    """Values from the run are HTML-escaped; plots are inline PNGs, nothing is loaded from elsewhere."""
    r = report().model_copy(
        update={
            "environment": Environment(served_model_name="<script>alert(1)</script>"),
            "errors": ErrorSummary(by_kind={"http_status": 1}, examples={"http_status": ["<b>boom</b>"]}),
        }
    )
    page = write_html(report_sections(r, rows()))
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page and "&lt;b&gt;boom" in page
    assert "data:image/png;base64," in page and "<script" not in page


def test_html_survives_a_failing_plot(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plotting error becomes a note in the page, never a lost report."""
    import sidecar.render.page_sections as render_html_module

    def boom(_: object) -> bytes:
        raise RuntimeError("no fonts")

    monkeypatch.setattr(render_html_module, "latency_cdf_png", boom)
    page = write_html(report_sections(report(), rows()))
    assert "Latency CDF: could not be drawn (RuntimeError)" in page


def test_plots_are_png_or_none_without_data() -> None:
    """Each plot is a PNG when there is data and None when there is none."""
    assert (latency_cdf_png(rows()) or b"").startswith(PNG) and latency_cdf_png([]) is None
    assert (throughput_png(report().metrics.windows) or b"").startswith(PNG) and throughput_png([]) is None
    points = [ResourcePoint(t_s=float(i), vllm_rss_gb=1.0 + i, vllm_cpu_percent=50.0) for i in range(5)]
    assert (resources_png(points) or b"").startswith(PNG) and resources_png([]) is None


def test_redactor_masks_raw_json_and_html_forms() -> None:
    """A secret is masked however it was escaped, and any hf_ token shape too."""
    redact = Redactor(['pa"ss<word>'])
    assert redact('x pa"ss<word> y') == "x *** y"
    assert redact('"pa\\"ss<word>"') == '"***"'
    assert redact("pa&quot;ss&lt;word&gt;") == "***"
    assert redact("token hf_AbCdEfGhIjKlMnOpQrStUv12 end") == "token *** end"


def test_secret_values_come_from_settings_and_secret_named_env_vars(tmp_path: Path) -> None:
    """HF token, UI password and *_API_KEY / *TOKEN variables are collected; short and ordinary values are not (a
    run folder of its own: the checkout's ``run/sidecar_token`` of an earlier ``make up`` is not this test's)."""
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, hf_token="hf_secret_xyz", ui_password="hunter22", run_dir=tmp_path / "run"
    )
    found = secret_values(settings, {"OPENAI_API_KEY": "sk-123456789", "HOME": "/root/secretive", "X_TOKEN": "abc"})
    assert set(found) == {"hf_secret_xyz", "hunter22", "sk-123456789"}


@pytest.mark.parametrize(
    ("url", "clean"),
    [
        ("http://user:pw@host:8100", "http://***@host:8100"),
        ("http://host:8100", "http://host:8100"),
        ("https://tok@example.com/v1", "https://***@example.com/v1"),
    ],
)
def test_url_credentials_are_stripped(url: str, clean: str) -> None:
    """Credentials in a URL never reach the report's config."""
    assert strip_url_credentials(url) == clean


def test_csv_exports_one_row_per_request_and_a_summary_row() -> None:
    """The rows CSV has a header and one line per request (ITL summarised); the summary CSV one line of headlines."""
    import csv
    import io

    from sidecar.render.pages import ROW_COLUMNS, rows_csv, summary_csv
    from tests.unit.sidecar.test_sidecar_store import report

    records = rows()
    table = list(csv.DictReader(io.StringIO(rows_csv(records))))
    assert len(table) == len(records) and list(table[0]) == list(ROW_COLUMNS)
    assert table[0]["request_id"] == records[0].request_id and table[0]["itl_count"] == str(len(records[0].itl_ms))
    (summary,) = csv.DictReader(io.StringIO(summary_csv(report())))
    assert summary["report_id"] == report().report_id and float(summary["throughput_req_per_sec"]) == 2.0
