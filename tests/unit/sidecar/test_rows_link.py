"""The sidecar reads a run's rows from the benchmark's rows file, by the run's id (never from the body, never from
outside ``logs/runs``), and the report keeps that file itself (a hard link) unless masking would change it."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable
from pathlib import Path

from fastapi.testclient import TestClient

from core.records import RequestRecord
from sidecar.reports.rows_link import read_run_rows
from sidecar.reports.store import ReportStore
from tests.fakes import FakeNvml
from tests.unit.sidecar.test_sidecar_app import body, client_for, make_settings  # noqa: F401 (client_for: fixture)
from tests.unit.sidecar.test_sidecar_store import report


def test_the_report_keeps_the_runs_rows_file_and_outlives_its_clean_up(
    client_for: Callable[..., TestClient], tmp_path: Path  # noqa: F811
) -> None:
    """POST /reports links logs/runs/<run>.requests.jsonl as the report's rows (one inode, two names); after the run's
    file is removed the report still loads, its rows are all there and the CSV and HTML plots were made from them."""
    client = client_for(FakeNvml())
    payload = body(n=12)
    source = tmp_path / "logs" / "runs" / f"{payload['run_id']}.requests.jsonl"
    response = client.post("/reports", json=payload)
    assert response.status_code == 200, response.text
    path = Path(response.json()["report_path"])
    report_json = json.loads(path.read_text())
    rows = path.parent / report_json["requests_file"]
    assert os.path.samefile(rows, source) and rows.stat().st_nlink == 2
    source.unlink()  # logs/runs cleaned
    assert rows.stat().st_nlink == 1 and len(rows.read_text().splitlines()) == 12
    assert [RequestRecord.model_validate_json(line).request_id for line in rows.read_text().splitlines()] == [
        f"r{i}" for i in range(12)
    ]
    table = list(csv.DictReader(io.StringIO((path.parent / report_json["csv_file"]).read_text())))
    assert len(table) == 12
    assert (path.parent / report_json["html_file"]).read_text().count("data:image/png;base64,") == 3


def test_rows_that_masking_would_change_are_written_masked_not_linked(
    client_for: Callable[..., TestClient], tmp_path: Path  # noqa: F811
) -> None:
    """A rows file holding a configured secret is not linked: the report's rows are the file's, masked, and the
    run's own file is left as it was."""
    secret = "k-very-secret-key-123"
    settings = make_settings(tmp_path, vllm_api_key=secret)
    payload = body(n=3, error=f"server echoed {secret}")
    source = tmp_path / "logs" / "runs" / f"{payload['run_id']}.requests.jsonl"
    response = client_for(FakeNvml(), settings).post("/reports", json=payload)
    assert response.status_code == 200, response.text
    path = Path(response.json()["report_path"])
    rows = path.with_name(path.stem + ".requests.jsonl")
    assert not os.path.samefile(rows, source) and secret in source.read_text()
    assert secret not in rows.read_text() and len(rows.read_text().splitlines()) == 4


def test_a_run_id_that_is_a_path_is_400_and_nothing_is_read(
    client_for: Callable[..., TestClient], tmp_path: Path  # noqa: F811
) -> None:
    """A run id naming anything but a rows file in logs/runs (a path, a traversal, a symlink) is refused with 400
    naming the run id, and no file outside logs/runs becomes a report's rows; a missing rows file is 422 naming it."""
    client = client_for(FakeNvml())
    payload = body(n=5)
    outside = tmp_path / "logs" / "secret.requests.jsonl"
    outside.write_text((tmp_path / "logs" / "runs" / f"{payload['run_id']}.requests.jsonl").read_text())
    for bad in ("../secret", "/etc/passwd", "20260101_000000/../../secret", "20260101_000000\n"):
        answer = client.post("/reports", json={**payload, "run_id": bad})
        assert answer.status_code == 400 and "is not a run id" in answer.json()["detail"], (bad, answer.text)
    link = tmp_path / "logs" / "runs" / "20260101_999999.requests.jsonl"
    link.symlink_to(outside)
    missing = client.post("/reports", json={**payload, "run_id": "20260101_999999"})
    assert missing.status_code == 422 and "no rows file" in missing.json()["detail"]
    assert "LOGS_DIR" in missing.json()["detail"]
    assert not (tmp_path / "reports").exists() or not list((tmp_path / "reports").glob("benchmark_report_*"))


def test_a_report_written_with_its_own_copy_of_the_rows_still_loads(tmp_path: Path) -> None:
    """A report whose rows are a copy in reports/ (earlier versions, or masked) lists, loads and names its rows file
    as ever."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "20260101_120000.requests.jsonl").write_text(RequestRecord(request_id="r0", started_at=1.8e9, ok=True).model_dump_json() + "\n")
    store = ReportStore(tmp_path / "reports", redact=lambda text: text.replace("r0", "r*"))
    path = store.write(report(), rows=read_run_rows(runs, "20260101_120000"))
    loaded = store.get(path.stem)
    assert loaded.requests_file == f"{path.stem}.requests.jsonl"
    assert json.loads((tmp_path / "reports" / loaded.requests_file).read_text())["request_id"] == "r*"
    assert [p.name for p in store.files_of(path.stem)][:2] == [path.name, loaded.requests_file]
