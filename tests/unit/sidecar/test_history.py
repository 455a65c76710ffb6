"""`make history`: each workload's runs over time from a reports folder, baselines marked, failed gates flagged."""

from __future__ import annotations

import time
from pathlib import Path

from core.gate import history_table, timelines
from sidecar.reports.history import main
from sidecar.reports.store import BaselineStore, ReportStore
from sidecar.reports.writer import ReportService
from sidecar.sampling.gpu import NvmlReader
from tests.fakes import FakeNvml
from tests.unit.sidecar.test_sidecar_app import make_settings
from tests.unit.sidecar.test_sidecar_gate import _service_body


def _folder(tmp_path: Path) -> Path:
    """Six reports of two workloads (concurrency 2 and 3): workload A has a baseline v1, an equal run and a slower
    one that fails the gate; workload B has three runs."""
    settings = make_settings(tmp_path)
    svc = ReportService.from_settings(settings, gpu=(NvmlReader(FakeNvml()), None), server_facts=lambda url: {})
    svc.build_and_write(_service_body(e2e_ms=100.0, gap_s=0.05))
    svc.mark_baseline("v1")
    for e2e_ms, gap_s in ((100.0, 0.05), (150.0, 0.075)):
        time.sleep(1.05)  # report ids have a one-second resolution
        svc.build_and_write(_service_body(e2e_ms=e2e_ms, gap_s=gap_s))
    for e2e_ms in (80.0, 90.0, 85.0):
        time.sleep(1.05)
        body = _service_body(e2e_ms=e2e_ms, gap_s=0.05)
        body = body.model_copy(update={"config": body.config.model_copy(update={"concurrency": 3})})
        svc.build_and_write(body)
    return settings.reports_dir


def test_history_groups_by_workload_marks_baselines_and_flags_gates(tmp_path: Path, capsys) -> None:
    """Two timelines (3 runs each) in time order; the baseline is marked on its run, the slower run flagged with
    the metric that failed; the terminal table and history.html show both."""
    root = _folder(tmp_path)
    lines_of = timelines(ReportStore(root).list(), BaselineStore(root).all(), 5.0)
    assert sorted(len(t.points) for t in lines_of) == [3, 3]
    a = next(t for t in lines_of if "c=2" in t.label)
    assert [p.baselines for p in a.points] == [["v1"], [], []]
    assert not a.points[1].gate_failures
    assert any(f.startswith("vs_v1: latency_p99_ms +50.0%") for f in a.points[2].gate_failures)
    assert [p.run_ended_at for p in a.points] == sorted(p.run_ended_at for p in a.points)
    table = history_table(lines_of)
    assert sum(line.startswith("[HISTORY] workload ") for line in table) == 2
    assert any("[baseline: v1]" in line for line in table) and any("FAIL vs_v1: " in line for line in table)

    assert main([str(root)]) == 0
    out = capsys.readouterr().out
    assert "[baseline: v1]" in out and f"[REPORT] History: {root / 'history.html'}" in out
    page = (root / "history.html").read_text()
    assert page.count('<img alt="timeline ') == 2 and "latency_p99_ms +50.0%" in page


def test_empty_folder_is_a_clear_error(tmp_path: Path, capsys) -> None:
    """No report: exit 2 and a line saying what to run."""
    assert main([str(tmp_path)]) == 2
    assert "no report with a workload fingerprint" in capsys.readouterr().err


def test_sidecar_history_page_shows_its_store(tmp_path: Path) -> None:
    """GET /history draws the sidecar's own store: both workloads' plots (no sampler started: no lifespan)."""
    from fastapi.testclient import TestClient

    from sidecar.server import create_app
    from tests.unit.sidecar.test_sidecar_app import AUTH, BASE_URL, make_service

    root = _folder(tmp_path)
    settings = make_settings(tmp_path)
    assert settings.reports_dir == root
    client = TestClient(create_app(settings, make_service(settings)), base_url=BASE_URL, headers=AUTH)
    page = client.get("/history")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.text.count('<img alt="timeline ') == 2


def test_interrupted_ended_early_and_all_failed_runs_are_flagged(tmp_path: Path) -> None:
    """A run that did not go as planned says so on its line of the table and in history.html; a plain run has no
    flag."""
    from core.gate import run_flags
    from sidecar.reports.history import history_html
    from tests.unit.sidecar.test_sidecar_store import report

    plain = report("benchmark_report_20260101_120000", ended=1.0)
    interrupted = report("benchmark_report_20260101_120001", ended=2.0).model_copy(update={"interrupted": True})
    down = report("benchmark_report_20260101_120002", ended=3.0).model_copy(
        update={"server_down": "vLLM stopped answering at 12:00:02: connection refused for 5 s"}
    )
    failed = report("benchmark_report_20260101_120003", ended=4.0)
    failed = failed.model_copy(update={"metrics": failed.metrics.model_copy(update={"requests_ok": 0})})
    assert [run_flags(r) for r in (plain, interrupted, down, failed)] == [
        [], ["interrupted"], ["ended early (server down)"], ["all failed"]
    ]
    runs = [r.model_copy(update={"fingerprint": "f"}) for r in (plain, interrupted, down, failed)]
    (timeline,) = timelines(runs, {})
    table = history_table([timeline])[2:]
    assert table[0].endswith("n/a") or "[" not in table[0]
    assert table[1].endswith("[interrupted]") and table[2].endswith("[ended early (server down)]")
    assert table[3].endswith("[all failed]")
    page = history_html([timeline])
    assert "<td>interrupted</td>" in page and "<td>all failed</td>" in page
