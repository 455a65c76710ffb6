"""A load test's request-log line is derived from its row and names the rows file that holds the whole row."""

from __future__ import annotations

import json
from pathlib import Path

from core.records import RequestRecord
from core.report_schema import BenchmarkConfig
from core.requestlog import RequestLog, RequestLogLine
from loadgen.locust_side.process_state import RunState


def plan(tmp_path: Path) -> BenchmarkConfig:
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "题"}\n', encoding="utf-8")
    return BenchmarkConfig(concurrency=1, warmup_requests=0, max_tokens=8, temperature=0.0, dataset=str(data), seed=0,
                           vllm_url="http://x", model="m")  # fmt: skip


def test_each_request_log_line_points_at_its_row_in_the_runs_rows_file(tmp_path: Path) -> None:
    """RunState.save appends the row to logs/runs/<run>.requests.jsonl and a line to requests.jsonl that carries the
    run id and request id of that row, with the row's own figures; the analyzer's parser reads it back."""
    log = tmp_path / "requests.jsonl"
    state = RunState(plan(tmp_path), RequestLog(log))
    rows_file = tmp_path / "runs" / "20260101_120000.requests.jsonl"
    rows_file.parent.mkdir()
    state.begin(2, rows_file)
    good = RequestRecord(request_id="r1", started_at=1.0, ok=True, ttft_ms=20.0, e2e_ms=90.0, output_tokens=7,
                         prompt_tokens=3)  # fmt: skip
    state.save(good)
    state.save(RequestRecord(request_id="r2", started_at=2.0, ok=False, error_kind="timeout", error="slow"))
    state.close()
    rows = {r.request_id: r for r in map(RequestRecord.model_validate_json, rows_file.read_text().splitlines())}
    lines = [RequestLogLine.parse(raw) for raw in log.read_text().splitlines()]
    assert [line.run_id for line in lines] == ["20260101_120000"] * 2
    for line in lines:
        row = rows[line.request_id]  # the link: run id -> rows file, request id -> row
        derived = RequestLogLine.from_record(row, "loadtest", "m", "20260101_120000")
        assert {**line.as_dict(), "ts": None} == {**derived.as_dict(), "ts": None}


def test_a_ui_line_has_no_run_and_reads_as_before() -> None:
    """A line without a run (the chat UI, older files) is written without the key and parses with run_id None."""
    line = RequestLogLine(ts="2026-01-01T00:00:00.000+00:00", source="ui", request_id="u", model="m", prompt_tokens=1,
                          completion_tokens=2, ttft_ms=3.0, total_ms=4.0, status="ok")  # fmt: skip
    assert "run_id" not in line.as_dict()
    assert RequestLogLine.parse(json.dumps(line.as_dict())).run_id is None
