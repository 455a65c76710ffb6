"""Data once (issue 37): one real benchmark (real Locust against the mock server) reporting through the real sidecar
app in-process (its HTTP interface, every call counted): the rows are written to disk once, cross HTTP zero times,
and the run takes at most 3 round trips to the sidecar; vLLM's facts are asked for by one process only."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from core.records import RequestRecord
from loadgen.command import benchmark as bench
from sidecar.reports.writer import ReportService
from sidecar.sampling.gpu import NvmlReader
from sidecar.server import create_app
from tests.fakes import FakeNvml
from tests.unit.loadgen.mock_process import mock_process
from tests.unit.sidecar.test_sidecar_app import BASE_URL, TOKEN, make_settings

MAX_ROUND_TRIPS = 3


def test_one_run_writes_its_rows_once_sends_none_and_asks_the_sidecar_at_most_3_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole ``./run_benchmark.sh --requests 6 --concurrency 2`` against the mock: exit 0 and a report of all 6
    requests; every row is on disk once (the run's rows file and the report's rows are one inode), no body sent to
    the sidecar carries a row, the sidecar is called at most 3 times, and vLLM's /version and /v1/models are asked
    by the benchmark alone."""
    with mock_process("--tokens", "8", "--ttft-ms", "5", "--itl-ms", "1") as url:
        settings = make_settings(tmp_path).model_copy(update={"vllm_base_url": url})
        service = ReportService.from_settings(settings, gpu=(NvmlReader(FakeNvml()), None))  # asks vLLM for real
        app = TestClient(create_app(settings, service), base_url=BASE_URL, headers={"Authorization": f"Bearer {TOKEN}"})
        facts_asked: list[str] = []  # who asked vLLM's /version or /v1/models: "benchmark" or "sidecar"
        sidecar_calls: list[tuple[str, str, str]] = []
        serving: list[bool] = []  # inside a sidecar call: its own calls to vLLM are the sidecar's

        def route(method: str) -> Callable[..., httpx.Response]:
            real = getattr(httpx, method)

            def call(target: str, **kwargs: Any) -> httpx.Response:
                if not target.startswith(BASE_URL):  # vLLM (the mock): as it is
                    if target.endswith(("/version", "/v1/models")):
                        facts_asked.append("sidecar" if serving else "benchmark")
                    return real(target, **kwargs)
                kwargs.pop("timeout", None)
                sent = kwargs.get("content") or json.dumps(kwargs.get("json") or {})
                sidecar_calls.append((method.upper(), target.removeprefix(BASE_URL), str(sent)))
                serving.append(True)
                try:
                    return getattr(app, method)(target.removeprefix(BASE_URL), **kwargs)
                finally:
                    serving.pop()

            return call

        for method in ("get", "post", "put"):
            monkeypatch.setattr(httpx, method, route(method))
        for name, value in {"LOGS_DIR": tmp_path / "logs", "REPORTS_DIR": tmp_path / "reports",
                            "RUN_DIR": tmp_path / "run", "VLLM_BASE_URL": url, "SIDECAR_BASE_URL": BASE_URL,
                            "SIDECAR_TOKEN": TOKEN, "WARMUP": 2}.items():  # fmt: skip
            monkeypatch.setenv(name, str(value))
        with app:
            code = bench.main(["--requests", "6", "--concurrency", "2", "--max-tokens", "8"])
    assert code == 0
    (rows_file,) = (tmp_path / "logs" / "runs").glob("*.requests.jsonl")
    rows = [RequestRecord.model_validate_json(line) for line in rows_file.read_text().splitlines()]
    assert len(rows) == 8 and sum(r.phase == "measured" for r in rows) == 6
    (report_path,) = (tmp_path / "reports").glob("benchmark_report_*.json")
    report = json.loads(report_path.read_text())
    assert report["metrics"]["requests_total"] == 6
    rows_copies = [*(tmp_path / "logs" / "runs").glob("*.requests.jsonl"), *(tmp_path / "reports").glob("*.jsonl")]
    assert len({os.stat(p).st_ino for p in rows_copies}) == 1, "the rows are on disk once"
    bodies = "".join(sent for _, _, sent in sidecar_calls)
    assert sum(bodies.count(r.request_id) for r in rows) == 0, "no row crossed HTTP"
    assert len(sidecar_calls) <= MAX_ROUND_TRIPS, [(m, p) for m, p, _ in sidecar_calls]
    assert [p for m, p, _ in sidecar_calls if m == "POST"][-1] == "/reports"
    assert facts_asked and set(facts_asked) == {"benchmark"}, facts_asked
    assert report["environment"]["vllm_version"] and report["environment"]["served_model_name"] == "mock-model"
