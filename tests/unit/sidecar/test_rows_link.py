"""A report keeps its run's rows file (a hard link, no third copy) and still has its rows after ``logs/runs`` is
cleaned; where it cannot (masking, a different count, a bad run id) it writes them as before."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from core.records import RequestRecord
from sidecar.reports.store import ReportStore
from tests.fakes import FakeNvml
from tests.unit.sidecar.test_sidecar_app import body, client_for, make_settings  # noqa: F401 (client_for: fixture)
from tests.unit.sidecar.test_sidecar_store import report


def run_file(tmp_path: Path, payload: dict[str, Any], run_id: str = "20260101_120000") -> Path:
    """The benchmark's rows file of ``payload``'s rows (as Locust appends them) and the run id in the payload."""
    runs = tmp_path / "logs" / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    path = runs / f"{run_id}.requests.jsonl"
    rows = [RequestRecord.model_validate(r).model_dump_json() + "\n" for r in payload["records"]]
    path.write_text("".join(rows), encoding="utf-8")
    payload["run_id"] = run_id
    return path


def test_the_report_keeps_the_runs_rows_file_and_outlives_its_clean_up(
    client_for: Callable[..., TestClient], tmp_path: Path  # noqa: F811
) -> None:
    """POST /reports links logs/runs/<run>.requests.jsonl as the report's rows (one inode, two names); after the run's
    file is removed the report still loads, its rows are all there and the CSV and HTML plots were made from them."""
    payload = body(n=12)
    source = run_file(tmp_path, payload)
    response = client_for(FakeNvml()).post("/reports", json=payload)
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
    """A rows file holding a configured secret is not linked: the report's rows are written from the request,
    masked, and the run's own file is left as it was."""
    secret = "k-very-secret-key-123"
    payload = body(n=3, error=f"server echoed {secret}")
    source = run_file(tmp_path, payload)
    settings = make_settings(tmp_path, vllm_api_key=secret)
    response = client_for(FakeNvml(), settings).post("/reports", json=payload)
    assert response.status_code == 200, response.text
    path = Path(response.json()["report_path"])
    rows = path.with_name(path.stem + ".requests.jsonl")
    assert not os.path.samefile(rows, source) and secret in source.read_text()
    assert secret not in rows.read_text() and len(rows.read_text().splitlines()) == 4


def test_a_rows_file_that_differs_from_the_request_or_a_bad_run_id_is_not_linked(
    client_for: Callable[..., TestClient], tmp_path: Path  # noqa: F811
) -> None:
    """A run's file with another number of rows (a torn or later line) or a run id with a path in it is never
    linked: the report's rows are the request's, written as before."""
    client = client_for(FakeNvml())
    payload = body(n=5)
    source = run_file(tmp_path, payload)
    with source.open("a") as fh:
        fh.write('{"request_id": "late"}\n')
    first = Path(client.post("/reports", json=payload).json()["report_path"])
    assert not os.path.samefile(first.with_name(first.stem + ".requests.jsonl"), source)
    assert len(first.with_name(first.stem + ".requests.jsonl").read_text().splitlines()) == 5
    outside = tmp_path / "logs" / "secret.requests.jsonl"
    outside.write_text("".join(RequestRecord.model_validate(r).model_dump_json() + "\n" for r in payload["records"]))
    payload["run_id"] = "../secret"
    second = client.post("/reports", json=payload)
    assert second.status_code in (200, 422), second.text
    if second.status_code == 200:
        path = Path(second.json()["report_path"])
        assert not os.path.samefile(path.with_name(path.stem + ".requests.jsonl"), outside)


def test_a_report_written_with_its_own_copy_of_the_rows_still_loads(tmp_path: Path) -> None:
    """Reports written before (rows serialised into reports/) list, load and name their rows file as ever."""
    store = ReportStore(tmp_path)
    path = store.write(report(), rows=['{"request_id": "r0"}'])
    loaded = store.get(path.stem)
    assert loaded.requests_file == f"{path.stem}.requests.jsonl"
    assert (tmp_path / loaded.requests_file).read_text() == '{"request_id": "r0"}\n'
    assert [p.name for p in store.files_of(path.stem)][:2] == [path.name, loaded.requests_file]
