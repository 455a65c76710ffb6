"""Results written by schema 1.3 before the single pipeline (tests/fixtures/report_1.3.json and baselines_1.3/: a
report baseline ``v1`` and a series baseline ``s1``, made with the code of 87d6ee6) still load, compare and gate."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from core.gate import EXIT_FAIL, EXIT_PASS, gate_verdict
from core.report_schema import SCHEMA_VERSION, Report, migrate_report
from core.series_stats import SeriesReport
from sidecar.reports import envinfo
from tests.unit.core.test_sidecar_series import post_run, series_body
from tests.unit.sidecar.test_sidecar_app import client_for  # noqa: F401 (a fixture)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
BASELINES = FIXTURES / "baselines_1.3"


def test_a_1_3_report_loads_as_the_current_version() -> None:
    """The 1.3 fixture report validates (through migrate_report) with its metrics and comparison intact."""
    data = json.loads((FIXTURES / "report_1.3.json").read_text())
    assert data["schema_version"] == "1.3"
    report = Report.model_validate(migrate_report(data))
    assert report.schema_version == SCHEMA_VERSION
    assert report.metrics.requests_ok == 12 and report.fingerprint == data["comparison"]["fingerprint"]


def test_1_3_baselines_compare_and_gate_new_runs_and_series(
    client_for: Callable[..., TestClient], tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """A new run of the fixture's workload is compared with report baseline v1 and passes its gate (a slower one
    fails); a new series is compared with series baseline s1 and gated with intervals; both old files list. The new
    runs are made on the fixture's CPU (a CPU-only run's workload includes its CPU model: a run on another CPU is
    refused as a comparison, rightly)."""
    reports = tmp_path / "reports"
    shutil.copytree(BASELINES, reports, dirs_exist_ok=True)
    fixture_cpu = json.loads((BASELINES / "benchmark_report_20261202_023149.json").read_text())["environment"]
    monkeypatch.setattr(envinfo, "cpu_model", lambda: fixture_cpu["cpu_model"])
    client = client_for()
    assert client.get("/baselines").json() == json.loads((BASELINES / "baselines.json").read_text())
    v1 = json.loads((BASELINES / "baselines.json").read_text())["v1"]
    assert client.get(f"/reports/{v1}").status_code == 200
    listed = {r["report_id"] for r in client.get("/reports").json()}
    assert v1 in listed
    same = Report.model_validate(client.get(f"/reports/{post_run(client, 4, 100.0)}").json())
    assert same.comparison["vs_v1"].against == v1
    assert gate_verdict(same, "v1", 5.0).exit_code == EXIT_PASS
    slower = Report.model_validate(client.get(f"/reports/{post_run(client, 4, 300.0)}").json())
    verdict = gate_verdict(slower, "v1", 5.0)
    assert verdict.exit_code == EXIT_FAIL and "latency_p99_ms" in verdict.line
    runs = [post_run(client, 4, 100.0) for _ in range(2)]
    built = client.post("/series", json=series_body([("c4", 4, runs)]))
    assert built.status_code == 200, built.text
    series = SeriesReport.model_validate(built.json()["series"])
    s1 = json.loads((BASELINES / "baselines.json").read_text())["s1"]
    assert series.comparison["vs_s1"].against == s1 and series.comparison["vs_s1"].points
    assert gate_verdict(series, "s1", 5.0).exit_code == EXIT_PASS
    compared = client.post("/compare", json={"a": "v1", "b": "s1"})
    assert compared.status_code == 200, compared.text


def test_a_stored_reports_own_comparison_reads_as_one_and_gates() -> None:
    """The comparison a 1.3 report stored (``changes_pct`` plus its duplicate ``vs_*`` keys) reads as one comparison
    per reference — one unlabelled point, no interval, the error rate as its two values — and gates as it did: a
    pass naming ``latency_p99_ms`` and the error rate in points."""
    report = Report.model_validate(json.loads((BASELINES / "benchmark_report_20261202_023152.json").read_text()))
    assert set(report.comparison) == {"vs_previous", "vs_v1"}
    (point,) = report.comparison["vs_v1"].points
    assert point.label == "" and point.changes["e2e_p99_ms"].change_pct == 0.0
    errors = point.changes["error_rate_percent"]
    assert (errors.a_mean, errors.b_mean) == (0.0, 0.0)
    verdict = gate_verdict(report, "v1", 5.0)
    assert verdict.exit_code == EXIT_PASS and verdict.line.startswith("[GATE] PASS vs v1 (benchmark_report_20261202_023149)")
    assert [c.name for c in verdict.checks] == ["error_rate_percent", "throughput_req_per_sec", "latency_p99_ms"]
    assert "vs_" not in json.dumps(json.loads(report.model_dump_json())["comparison"]["vs_v1"])
