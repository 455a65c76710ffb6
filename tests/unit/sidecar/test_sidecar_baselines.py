"""Named baselines: validated names, atomic file, tolerant reading, resolution to reports."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from sidecar.reports.store import BaselineStore, ReportStore, validate_baseline_name
from tests.unit.sidecar.test_sidecar_store import report, rows_of


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
