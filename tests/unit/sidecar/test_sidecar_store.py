"""The reports folder: atomic no-clobber writes, tolerant listing, safe ids, comparisons; named baselines."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from core.comparison import compare_with_history, report_notes
from core.intervals import Change, Comparison, PointComparison, Verdict
from core.records import RequestRecord
from core.report_schema import (
    BenchmarkConfig,
    Environment,
    ErrorSummary,
    LogFacts,
    Report,
    Resources,
)
from core.stats import run_metrics
from sidecar.reports.builder import build_metrics
from sidecar.reports.rows_link import RunRows
from sidecar.reports.store import BaselineStore, ReportStore, validate_baseline_name, validate_report_id


def rows_of(*lines: str) -> RunRows:
    """A run's rows as read from a file that is gone (so they are written, not linked)."""
    return RunRows(Path("/nonexistent/20260101_120000.requests.jsonl"), "".join(f"{line}\n" for line in lines), [])


def report(
    report_id: str = "benchmark_report_20260101_120000",
    throughput: float = 2.0,
    ended: float = 1.0,
    concurrency: int = 8,
) -> Report:
    rows = [
        RequestRecord(request_id=f"r{i}", started_at=float(i), ok=True, e2e_ms=100.0, ttft_ms=20.0, output_tokens=10)
        for i in range(10)
    ]
    metrics = build_metrics(run_metrics(rows), Resources(vllm_rss_peak_gb=1.0)).model_copy(
        update={"throughput_req_per_sec": throughput}
    )
    config = BenchmarkConfig(
        concurrency=concurrency,
        requests=10,
        warmup_requests=0,
        max_tokens=32,
        temperature=0.0,
        dataset="d",
        seed=0,
        vllm_url="http://x",
        model="m",
    )
    return Report(
        report_id=report_id,
        timestamp="t",
        run_started_at=0.0,
        run_ended_at=ended,
        environment=Environment(),
        config=config,
        metrics=metrics,
        errors=ErrorSummary(),
        resources=Resources(),
        logs=LogFacts(log_file="l", found=False),
        requests_file="",
    )


def single_run(
    against: str, changes_pct: dict[str, float | None], error_rates: tuple[float, float] | None = None
) -> Comparison:
    """A single run's comparison with ``against``: plain percent changes per metric (no interval) and, given
    ``error_rates``, the error rate's value then and now (%)."""
    plain: Verdict = "no interval (single runs)"
    changes = {name: Change(a_mean=None, b_mean=None, change_pct=v, verdict=plain) for name, v in changes_pct.items()}
    if error_rates is not None:
        changes["error_rate_percent"] = Change(a_mean=error_rates[0], b_mean=error_rates[1], change_pct=None,
                                               verdict=plain)  # fmt: skip
    point = PointComparison(label="", against_label="", against_ids=[against], changes=changes)
    return Comparison(against=against, points=[point])


def test_write_then_read_back(tmp_path: Path) -> None:
    """A written report lists and loads, and its rows file sits beside it."""
    store = ReportStore(tmp_path)
    path = store.write(report(), rows=rows_of('{"a": 1}'))
    assert path.name == "benchmark_report_20260101_120000.json"
    assert (tmp_path / "benchmark_report_20260101_120000.requests.jsonl").read_text() == '{"a": 1}\n'
    assert store.get("benchmark_report_20260101_120000").metrics.throughput_req_per_sec == 2.0
    assert [r.report_id for r in store.list()] == ["benchmark_report_20260101_120000"]


def test_same_second_reports_do_not_clobber(tmp_path: Path) -> None:
    """Concurrent writes with the same id get distinct files (_2, _3 ...)."""
    store = ReportStore(tmp_path)
    paths: list[Path] = []
    threads = [threading.Thread(target=lambda: paths.append(store.write(report(), rows=rows_of()))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(paths)) == 6 and len(store.list()) == 6


def test_corrupt_and_foreign_json_are_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A truncated report and a foreign JSON never break the listing; a warning names them."""
    store = ReportStore(tmp_path)
    store.write(report(), rows=rows_of())
    (tmp_path / "benchmark_report_20250101_000000.json").write_text('{"schema_version": "1.0", "repo')
    (tmp_path / "benchmark_report_20250101_000001.json").write_text('{"hello": "world"}')
    assert len(store.list()) == 1
    assert "benchmark_report_20250101_000000.json" in caplog.text


def test_no_temp_files_left_after_writes(tmp_path: Path) -> None:
    """Atomic writes leave no temporary files behind (a kill mid-write leaves only a dot-file, never a report)."""
    ReportStore(tmp_path).write(report(), rows=rows_of())
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("bad", ["../etc/passwd", "benchmark_report_x", "/abs", "benchmark_report_20260101_120000/.."])
def test_traversal_ids_are_refused(bad: str) -> None:
    """Only benchmark_report_YYYYMMDD_HHMMSS[_N] ids are accepted."""
    with pytest.raises(ValueError):
        validate_report_id(bad)


def test_comparison_with_previous_same_workload() -> None:
    """A new run is compared with the latest earlier run of the same workload."""
    old = report("benchmark_report_20260101_120000", throughput=2.0)
    other = report("benchmark_report_20260101_130000", throughput=9.0, concurrency=50, ended=2.0)
    new = report("benchmark_report_20260101_140000", throughput=2.5, ended=3.0)
    comparison = compare_with_history(new, [old, other], {}, 5.0)
    assert list(comparison) == ["vs_previous"] and comparison["vs_previous"].against == old.report_id
    assert comparison["vs_previous"].points[0].changes["throughput_req_per_sec"].change_pct == pytest.approx(25.0)


def test_first_run_has_nothing_to_compare() -> None:
    """Without an earlier run of the same workload the comparison says so."""
    new = report()
    assert compare_with_history(new, [], {}, 5.0) == {} and "first run" in report_notes(new)[0]


def test_crash_before_the_json_is_linked_leaves_no_visible_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure between the temp write and the JSON's link (a kill mid-write) leaves no report and no debris."""
    import os

    real_link = os.link

    def link(src: str, dst: str) -> None:
        if str(dst).endswith(".json"):
            raise OSError("simulated crash")
        real_link(src, dst)

    monkeypatch.setattr(os, "link", link)
    store = ReportStore(tmp_path)
    with pytest.raises(OSError, match="simulated crash"):
        store.write(report(), rows=rows_of('{"a": 1}'), render=lambda r: {".md": "# md", ".html": "<p>"})
    assert store.list() == [] and list(tmp_path.iterdir()) == []


def test_stray_temp_and_orphan_files_from_a_killed_writer_are_ignored(tmp_path: Path) -> None:
    """A half-written dot temp file and rows without a JSON (a SIGKILL mid-write) are invisible to the listing."""
    (tmp_path / ".benchmark_report_20260101_120000.json.x1y2.tmp").write_text('{"schema_version": "1.')
    (tmp_path / "benchmark_report_20260101_120000.requests.jsonl").write_text('{"a": 1}\n')
    store = ReportStore(tmp_path)
    assert store.list() == []
    path = store.write(report(), rows=rows_of())  # the orphan rows keep their id: the new report takes the next one
    assert path.name == "benchmark_report_20260101_120000_2.json" and len(store.list()) == 1


def test_attachments_are_written_beside_the_json_and_named_in_it(tmp_path: Path) -> None:
    """Markdown and HTML renderers get the final report (final id) and their files are recorded in it."""
    seen: list[str] = []

    def render(final: Report) -> dict[str, str]:
        seen.append(final.report_id)
        return {".md": f"# {final.report_id}", ".html": f"<h1>{final.html_file}</h1>"}

    store = ReportStore(tmp_path)
    store.write(report(), rows=rows_of())
    path = store.write(report(), rows=rows_of(), render=render)
    written = store.get(path.stem)
    assert seen == ["benchmark_report_20260101_120000_2"]
    assert written.markdown_file == "benchmark_report_20260101_120000_2.md"
    assert (tmp_path / "benchmark_report_20260101_120000_2.html").read_text() == (
        "<h1>benchmark_report_20260101_120000_2.html</h1>"
    )


def test_redactor_applies_to_every_file(tmp_path: Path) -> None:
    """The store's redactor masks secrets in rows, attachments and the JSON alike."""
    store = ReportStore(tmp_path, redact=lambda text: text.replace("s3cr3t", "***"))
    store.write(report(), rows=rows_of('{"error": "s3cr3t"}'), render=lambda r: {".md": "s3cr3t", ".html": "s3cr3t"})
    assert all("s3cr3t" not in f.read_text() for f in tmp_path.iterdir())


def test_listing_tolerates_a_non_object_json(tmp_path: Path) -> None:
    """A JSON array or number named like a report is skipped, not a crash."""
    (tmp_path / "benchmark_report_20250101_000003.json").write_text("42")
    assert ReportStore(tmp_path).list() == []


# Named baselines: validated names, atomic file, tolerant reading, resolution to reports
@pytest.mark.parametrize("name", ["v0.2.1", "main", "release-2026_01", "A" * 64])
def test_good_names(name: str) -> None:
    """Versions, branch-like names and 64 characters are accepted."""
    assert validate_baseline_name(name) == name


@pytest.mark.parametrize("name", ["", "previous", "../x", ".hidden", "-dash", "a/b", "a b", "A" * 65, "é"])
def test_bad_names(name: str) -> None:
    """Empty, reserved, path-like, spaced, overlong and non-ASCII names are refused."""
    with pytest.raises(ValueError):
        validate_baseline_name(name)


def test_set_replace_remove(tmp_path: Path) -> None:
    """Marks are stored sorted, replaced in place and removed; the file is valid JSON at every step."""
    store = BaselineStore(tmp_path)
    store.set("v2", "benchmark_report_20260101_120000")
    store.set("v1", "benchmark_report_20260101_110000")
    store.set("v2", "benchmark_report_20260101_130000")
    assert json.loads((tmp_path / "baselines.json").read_text()) == {
        "v1": "benchmark_report_20260101_110000",
        "v2": "benchmark_report_20260101_130000",
    }
    assert store.remove("v1") and not store.remove("v1")
    assert store.all() == {"v2": "benchmark_report_20260101_130000"}


def test_invalid_report_id_is_refused(tmp_path: Path) -> None:
    """A baseline can only point at a report id, never a path."""
    with pytest.raises(ValueError):
        BaselineStore(tmp_path).set("v1", "../../etc/passwd")
    assert not (tmp_path / "baselines.json").exists()


def test_corrupt_or_foreign_file_reads_as_empty(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A truncated file, a non-object and bad entries are skipped with a warning."""
    store = BaselineStore(tmp_path)
    (tmp_path / "baselines.json").write_text('{"v1": "benchmark_rep')
    assert store.all() == {} and "baselines.json" in caplog.text
    (tmp_path / "baselines.json").write_text('["v1"]')
    assert store.all() == {}
    (tmp_path / "baselines.json").write_text('{"ok": "benchmark_report_20260101_120000", "bad": "../x", "../y": "z"}')
    assert store.all() == {"ok": "benchmark_report_20260101_120000"}


def test_concurrent_marks_are_all_kept(tmp_path: Path) -> None:
    """Marks set from many threads at once all survive (read-modify-write is serialised)."""
    store = BaselineStore(tmp_path)
    threads = [
        threading.Thread(target=store.set, args=(f"v{i}", "benchmark_report_20260101_120000")) for i in range(12)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.all()) == 12 and not list(tmp_path.glob(".*.tmp"))


def test_resolve_gives_reports_or_reasons(tmp_path: Path) -> None:
    """Each baseline resolves to its report, or to a reason when the report is gone or corrupt."""
    reports = ReportStore(tmp_path)
    reports.write(report(), rows=rows_of())
    (tmp_path / "benchmark_report_20250101_000000.json").write_text("{")
    store = BaselineStore(tmp_path)
    store.set("ok", "benchmark_report_20260101_120000")
    store.set("gone", "benchmark_report_20200101_000000")
    store.set("broken", "benchmark_report_20250101_000000")
    resolved = store.resolve(reports)
    assert not isinstance(resolved["ok"], str) and resolved["ok"].report_id == "benchmark_report_20260101_120000"
    assert resolved["gone"] == "its report benchmark_report_20200101_000000 no longer exists"
    assert isinstance(resolved["broken"], str) and "unreadable" in resolved["broken"]
