"""The sidecar's HTTP API end to end in-process (FastAPI TestClient, fake NVML, no sockets)."""

from __future__ import annotations

import itertools
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from core.api import BuildReportRequest
from core.enginestate import EngineState, pid_namespace, write_engine_state
from core.records import RequestRecord
from core.report_schema import BenchmarkConfig
from core.settings import PROJECT_ROOT, Settings
from core.stats import run_metrics
from sidecar.reports.writer import ReportService
from sidecar.sampling.gpu import NvmlReader
from sidecar.server import create_app
from tests.fakes import FakeNvml

GIB = 1024**3
TOKEN = "test-sidecar-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BASE_URL = "http://127.0.0.1:8200"  # a trusted host (TestClient's default, testserver, is not)


RUNS_DIRS: list[Path] = []
"""The runs folder of the latest :func:`make_settings`: where :func:`body` writes its rows file by default."""
RUN_NUMBERS = itertools.count()


def make_settings(tmp_path: Path, **fields: Any) -> Settings:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        reports_dir=tmp_path / "reports",
        logs_dir=tmp_path / "logs",
        run_dir=tmp_path / "run",
        vllm_base_url="http://vllm.invalid:8100",
        gpu_sample_interval_s=0.2,
        sidecar_token=TOKEN,
        **fields,
    )
    RUNS_DIRS[:] = [settings.logs_dir / "runs"]
    return settings


def make_service(settings: Settings, nvml: FakeNvml | None = None) -> ReportService:
    gpu = (NvmlReader(nvml), None) if nvml is not None else (None, "NVML unavailable: Driver Not Loaded")
    return ReportService.from_settings(
        settings, gpu=gpu, server_facts=lambda url: {"version": "0.32.0", "model_id": "mock-model"}
    )


def write_run(rows: list[RequestRecord], runs_dir: Path | None = None, run_id: str | None = None) -> str:
    """Write ``rows`` as the benchmark does, a run's rows file in ``runs_dir`` (default: the latest settings'); its
    run id (default: a new one)."""
    run_id = run_id or f"20260101_{next(RUN_NUMBERS):06d}"
    folder = runs_dir or (RUNS_DIRS[-1] if RUNS_DIRS else Path(tempfile.mkdtemp()))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{run_id}.requests.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows))
    return run_id


def body(
    concurrency: int = 4, e2e_ms: float = 100.0, n: int = 12, error: str | None = None, runs_dir: Path | None = None
) -> dict[str, Any]:
    """A build request of ``n`` requests (one failed with ``error`` when given), ending about now, its rows written
    as the benchmark writes them: a new run's rows file in ``runs_dir`` (default: the latest settings')."""
    start = time.time() - 1.0
    rows = [
        RequestRecord(
            request_id=f"r{i}",
            started_at=start + i * 0.05,
            ok=True,
            ttft_ms=20.0 + i,
            e2e_ms=e2e_ms + i,
            itl_ms=[5.0] * 9,
            output_tokens=10,
            content_chunks=10,
            max_tokens=16,
        )
        for i in range(n)
    ]
    if error:
        rows.append(RequestRecord(request_id="bad", started_at=start, ok=False, e2e_ms=5.0, error_kind="http_status",
                                  error=error, http_status=500))
    config = BenchmarkConfig(
        concurrency=concurrency,
        requests=n,
        warmup_requests=0,
        max_tokens=16,
        temperature=0.0,
        dataset="loadgen/workloads/data/prompts_zh.jsonl",
        seed=0,
        vllm_url="http://vllm.invalid:8100",
        model="mock-model",
    )
    request = BuildReportRequest(
        config=config,
        run_id=write_run(rows, runs_dir),
        metrics=run_metrics(rows),
        window_start=start - 0.5,
        window_end=time.time() + 0.5,
    )
    return request.model_dump(mode="json")


@pytest.fixture
def client_for(tmp_path: Path) -> Iterator[Callable[..., TestClient]]:
    """Factory of started apps (lifespan run) over ``tmp_path``, their clients sending the token; closed at the
    end."""
    clients: list[TestClient] = []

    def make(nvml: FakeNvml | None = None, settings: Settings | None = None) -> TestClient:
        settings = settings or make_settings(tmp_path)
        client = TestClient(create_app(settings, make_service(settings, nvml)), base_url=BASE_URL, headers=AUTH)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def test_health_says_whether_gpu_sampling_works(client_for: Callable[..., TestClient]) -> None:
    """With fake NVML the GPU is reported; without NVML the reason is given instead."""
    assert client_for(FakeNvml()).get("/health").json() == {"status": "ok", "gpu": True, "gpu_unavailable_reason": None}
    health = client_for(None).get("/health").json()
    assert health["gpu"] is False and "Driver Not Loaded" in health["gpu_unavailable_reason"]


def test_resources_show_fake_gpu_readings(client_for: Callable[..., TestClient]) -> None:
    """Current readings carry per-GPU memory, utilisation and power from NVML."""
    data = client_for(FakeNvml(names=["A", "B"], used_bytes=[GIB, 3 * GIB])).get("/resources").json()
    assert [g["mem_used_gb"] for g in data["gpus"]] == [1.0, 3.0] and data["gpu_mem_used_gb"] == 4.0
    assert data["gpus"][0]["util_percent"] == 42.0 and data["gpus"][0]["power_w"] == 350.0
    assert data["gpu_names"] == ["A", "B"] and data["host_mem_used_gb"] > 0


def test_metrics_endpoint_is_prometheus_exposition(client_for: Callable[..., TestClient]) -> None:
    """/metrics exposes per-GPU memory, utilisation and power gauges in base units."""
    client = client_for(FakeNvml(used_bytes=[2 * GIB]))
    client.get("/resources")  # guarantees one sample
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    samples = {s.name: s for f in text_string_to_metric_families(response.text) for s in f.samples}
    used = samples["llmstack_sidecar_gpu_memory_used_bytes"]
    assert used.value == 2 * GIB and used.labels == {"gpu": "0", "name": "NVIDIA H200"}
    assert samples["llmstack_sidecar_gpu_power_watts"].value == 350.0
    assert samples["llmstack_sidecar_gpu_utilization_percent"].value == 42.0


def test_sampling_window_start_and_stop(client_for: Callable[..., TestClient]) -> None:
    """A window opened and closed over HTTP returns the peaks of the samples inside it; a second stop repeats them."""
    nvml = FakeNvml(used_bytes=[GIB])
    client = client_for(nvml)
    window = client.post("/windows/start").json()
    nvml.used_bytes = [9 * GIB]
    client.get("/resources")
    nvml.wait_for_reads(2)  # a background sample at 9 GiB, taken into the window (a loaded host can take > 0.3 s)
    nvml.used_bytes = [2 * GIB]
    stopped = client.post(f"/windows/{window['window_id']}/stop").json()
    assert stopped["resources"]["gpu_mem_peak_gb"] == pytest.approx(9.0)
    assert stopped["resources"]["gpus"][0]["power_w_peak"] == 350.0 and stopped["duration_s"] > 0
    assert client.post(f"/windows/{window['window_id']}/stop").json() == stopped
    assert client.post("/windows/0123456789abcdef/stop").status_code == 404
    assert client.post("/windows/..%2F..%2Fetc/stop").status_code == 404


def test_a_window_for_a_run_opens_only_where_the_sidecar_sees_its_rows(client_for: Callable[..., TestClient],
                                                                         tmp_path: Path) -> None:
    """``POST /windows/start?run_id=``: 200 when the run's rows file (even empty) is in the sidecar's LOGS_DIR/runs;
    422 naming that folder when the benchmark writes elsewhere (``--logs-dir``), so the run stops before its load;
    400 for a malformed id, which is never turned into a path."""
    client = client_for(FakeNvml())
    runs = tmp_path / "logs" / "runs"
    runs.mkdir(parents=True)
    (runs / "20260101_000001.requests.jsonl").touch()
    assert client.post("/windows/start", params={"run_id": "20260101_000001"}).status_code == 200
    missing = client.post("/windows/start", params={"run_id": "20260101_000002"})
    assert missing.status_code == 422 and str(runs) in missing.json()["detail"]
    assert "LOGS_DIR" in missing.json()["detail"]
    for bad in ("../../etc/passwd", "20260101_000001/../x", ""):
        assert client.post("/windows/start", params={"run_id": bad}).status_code == 400, bad


def test_a_window_left_open_is_closed_at_the_runs_end(client_for: Callable[..., TestClient]) -> None:
    """The benchmark does not stop its sampling window (one round trip less): POST /reports closes it at the run's
    end, so memory used after the run (while the report is asked for) is not the run's peak."""
    nvml = FakeNvml(used_bytes=[GIB])
    client = client_for(nvml)
    window = client.post("/windows/start").json()["window_id"]
    nvml.used_bytes = [3 * GIB]
    nvml.wait_for_reads(2)  # background samples at 3 GiB, inside the run
    payload = {**body(), "window_id": window, "window_end": time.time()}
    nvml.used_bytes = [20 * GIB]
    nvml.wait_for_reads(2)  # samples at 20 GiB after the run's end
    report = client.post("/reports", json=payload).json()["report"]
    assert report["metrics"]["gpu_mem_peak_gb"] == pytest.approx(3.0)


def test_report_is_json_markdown_and_html_valid_against_schema(client_for: Callable[..., TestClient],
                                                               tmp_path: Path) -> None:
    """POST /reports writes a JSON valid against reports/schema.json, a Markdown summary and a self-contained HTML."""
    response = client_for(FakeNvml()).post("/reports", json=body())
    assert response.status_code == 200, response.text
    path = Path(response.json()["report_path"])
    report = json.loads(path.read_text())
    jsonschema.validate(report, json.loads((PROJECT_ROOT / "reports" / "schema.json").read_text()))
    assert report["markdown_file"] == path.stem + ".md" and report["html_file"] == path.stem + ".html"
    markdown = (path.parent / report["markdown_file"]).read_text()
    assert "# Benchmark report" in markdown and "| Throughput |" in markdown
    page = (path.parent / report["html_file"]).read_text()
    assert page.count("data:image/png;base64,") == 3  # latency CDF, throughput, memory
    assert "<script" not in page and 'src="http' not in page and "<link" not in page
    assert report["resources"]["gpus"][0]["util_percent_mean"] == 42.0 and report["resources"]["timeline"]
    assert report["environment"]["project_version"] and report["environment"]["vllm_fingerprint"] == "vllm-0.32.0"
    assert (tmp_path / "reports" / "schema.json").exists()  # the sidecar keeps a schema next to its reports


def test_second_report_compares_with_first(client_for: Callable[..., TestClient]) -> None:
    """The second report of a workload carries comparison.vs_previous with percent changes."""
    client = client_for(FakeNvml())
    first = client.post("/reports", json=body()).json()["report"]
    second = client.post("/reports", json=body(e2e_ms=200.0)).json()
    previous = second["report"]["comparison"]["vs_previous"]
    assert previous["against"] == first["report_id"]
    assert previous["points"][0]["changes"]["e2e_p99_ms"]["change_pct"] > 50
    listing = client.get("/reports").json()
    assert [r["report_id"] for r in listing] == [first["report_id"], second["report"]["report_id"]]


def test_named_baseline_is_marked_listed_compared_and_forgotten(client_for: Callable[..., TestClient]) -> None:
    """PUT /baselines/v0.2.1 marks the latest report; the next report carries comparison.vs_v0.2.1."""
    client = client_for(FakeNvml())
    assert client.put("/baselines/v0.2.1").status_code == 404  # no report yet
    first = client.post("/reports", json=body()).json()["report"]
    marked = client.put("/baselines/v0.2.1", json={}).json()
    assert marked["report_id"] == first["report_id"] and marked["name"] == "v0.2.1"
    assert client.get("/baselines").json() == {"v0.2.1": first["report_id"]}
    second = client.post("/reports", json=body()).json()["report"]
    changes = second["comparison"]["vs_v0.2.1"]["points"][0]["changes"]
    assert changes["throughput_req_per_sec"]["change_pct"] == pytest.approx(0.0, abs=0.5)
    assert client.get("/reports").json()[0]["baselines"] == ["v0.2.1"]
    assert client.delete("/baselines/v0.2.1").status_code == 204
    assert client.delete("/baselines/v0.2.1").status_code == 404 and client.get("/baselines").json() == {}


def test_a_report_that_could_never_judge_is_no_baseline(client_for: Callable[..., TestClient]) -> None:
    """PUT /baselines/x on an interrupted, ended-early or all-failed report answers 400 saying why (it would only be
    refused later, by every gate against it); nothing is marked."""
    client = client_for(FakeNvml())
    cases: list[tuple[str, dict[str, Any]]] = [
        ("interrupted", {"interrupted": True}), ("ended early", {"server_down": "vLLM stopped answering"}),
        ("no successful request", {}),
    ]  # fmt: skip
    for words, extra in cases:
        run = {**(body() if extra else body(n=0, error="boom")), **extra}
        report_id = client.post("/reports", json=run).json()["report"]["report_id"]
        answer = client.put("/baselines/x", json={"report_id": report_id}, headers=AUTH)
        assert answer.status_code == 400 and words in answer.json()["detail"], answer.json()
        time.sleep(1.05)  # report ids have a one-second resolution
    assert client.get("/baselines").json() == {}


def test_marking_a_used_name_again_says_what_it_pointed_at(client_for: Callable[..., TestClient]) -> None:
    """PUT /baselines/v1 on an existing name answers ``previous_id`` (the old report) and the CLI line says
    ``was <old>, now <new>``; a new name answers None and prints no such line."""
    from loadgen.terminal.summary import moved_text

    client = client_for(FakeNvml())
    first = client.post("/reports", json=body()).json()["report"]["report_id"]
    marked = client.put("/baselines/v1", json={"report_id": first}, headers=AUTH).json()
    assert marked["previous_id"] is None and moved_text("v1", marked["previous_id"], first) is None
    time.sleep(1.05)  # report ids have a one-second resolution
    second = client.post("/reports", json=body()).json()["report"]["report_id"]
    marked = client.put("/baselines/v1", json={"report_id": second}, headers=AUTH).json()
    assert marked["previous_id"] == first
    assert moved_text("v1", marked["previous_id"], second) == f"[BASELINE] v1 moved: was {first}, now {second}"
    assert client.get("/baselines").json() == {"v1": second}


def test_baseline_of_another_workload_is_refused_naming_the_fields(client_for: Callable[..., TestClient]) -> None:
    """A baseline whose fingerprint differs is not compared; the note says which fields differ."""
    client = client_for(FakeNvml())
    first = client.post("/reports", json=body(concurrency=4)).json()["report"]
    client.put("/baselines/old", json={"report_id": first["report_id"]})
    comparison = client.post("/reports", json=body(concurrency=8)).json()["report"]["comparison"]
    assert not comparison["vs_old"]["points"] and "concurrency: 4 -> 8" in comparison["vs_old"]["refused"]


@pytest.mark.parametrize(("name", "status"), [("previous", 400), ("-x", 400), ("a" * 65, 400), ("a b", 400)])
def test_bad_baseline_names_are_refused(client_for: Callable[..., TestClient], name: str, status: int) -> None:
    """Baseline names are validated (reserved, leading dash, too long, spaces)."""
    client = client_for(FakeNvml())
    client.post("/reports", json=body())
    assert client.put(f"/baselines/{name}", json={}).status_code == status


def test_baseline_for_unknown_or_traversal_report_is_refused(client_for: Callable[..., TestClient]) -> None:
    """Marking a missing report is 404, a path-like id is 400; baselines.json is untouched."""
    client = client_for(FakeNvml())
    assert client.put("/baselines/v1", json={"report_id": "benchmark_report_20200101_000000"}).status_code == 404
    assert client.put("/baselines/v1", json={"report_id": "../../etc/passwd"}).status_code == 400
    assert client.get("/baselines").json() == {}


@pytest.mark.parametrize("bad", ["..%2F..%2Fetc%2Fpasswd", "benchmark_report_x", "%2Fetc%2Fpasswd", "schema"])
def test_report_ids_are_validated_over_http(client_for: Callable[..., TestClient], bad: str) -> None:
    """GET /reports/{id} refuses anything but a report id; no file outside reports/ is ever read."""
    response = client_for(FakeNvml()).get(f"/reports/{bad}")
    assert response.status_code in (400, 404) and "root:" not in response.text


def test_unknown_report_is_404(client_for: Callable[..., TestClient]) -> None:
    """A well-formed id without a file is 404."""
    assert client_for(FakeNvml()).get("/reports/benchmark_report_20200101_000000").status_code == 404


def test_without_nvml_the_report_has_no_gpu_figures_but_cpu_ones(client_for: Callable[..., TestClient],
                                                                 tmp_path: Path) -> None:
    """No NVML: GPU figures are null with the reason; the vLLM process tree's RSS and CPU % are reported."""
    settings = make_settings(tmp_path)
    settings.logs_dir.mkdir(parents=True)
    state = EngineState(
        requested="m", source="local", model_arg="/m", served_name="mock-model", pid=os.getpid(),
        pid_namespace=pid_namespace(),  # as the launcher records it: the sidecar samples only its own namespace
    )
    write_engine_state(settings.engine_state_file, state)
    client = client_for(None, settings)
    time.sleep(0.3)
    report = client.post("/reports", json=body()).json()["report"]
    assert report["metrics"]["gpu_mem_peak_gb"] is None and report["resources"]["gpus"] == []
    assert "Driver Not Loaded" in report["resources"]["gpu_unavailable_reason"]
    assert report["environment"]["gpu_model"] is None and report["environment"]["gpu_count"] == 0
    assert report["metrics"]["vllm_rss_peak_gb"] > 0 and report["resources"]["vllm_cpu_percent_peak"] is not None


def test_secrets_never_reach_reports(client_for: Callable[..., TestClient], tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_TOKEN and URL credentials appear in no file written (JSON, rows, Markdown, HTML), even when echoed."""
    monkeypatch.setenv("HF_TOKEN", "hf_secret_xyz")
    monkeypatch.setenv("UI_PASSWORD", "pw-very-secret")
    settings = make_settings(tmp_path)
    assert settings.hf_token == "hf_secret_xyz"
    payload = body(error="upstream said: bad token hf_secret_xyz, password pw-very-secret")
    payload["config"]["vllm_url"] = "http://user:pw-very-secret@vllm.invalid:8100"
    response = client_for(FakeNvml(), settings).post("/reports", json=payload)
    assert response.status_code == 200 and "hf_secret_xyz" not in response.text
    files = list((tmp_path / "reports").iterdir())
    assert {f.suffix for f in files} >= {".json", ".jsonl", ".md", ".html"}
    for f in files:
        text = f.read_text()
        assert "hf_secret_xyz" not in text and "pw-very-secret" not in text, f.name
    assert "***" in (tmp_path / "reports" / response.json()["report"]["markdown_file"]).read_text()


def test_missing_or_rotated_log_does_not_break_reports(client_for: Callable[..., TestClient], tmp_path: Path) -> None:
    """No vllm.log: logs.found is false; a log replaced between builds (rotation) is read afresh (the version comes
    from the log when vLLM does not answer)."""
    client = client_for(FakeNvml())
    first = client.post("/reports", json=body()).json()["report"]
    assert first["logs"]["found"] is False
    log = tmp_path / "logs" / "vllm.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"\x00garbage\n" * 1000 + b"INFO 01-01 00:00:00 [x.py:1] vLLM API server version 0.32.0\n")
    second = client.post("/reports", json=body()).json()["report"]
    assert second["logs"]["found"] is True and second["environment"]["vllm_version"] == "0.32.0"


def test_corrupt_reports_do_not_break_the_listing(client_for: Callable[..., TestClient], tmp_path: Path) -> None:
    """Truncated, foreign and stray temporary files in reports/ are skipped by GET /reports and comparisons."""
    client = client_for(FakeNvml())
    reports = tmp_path / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    (reports / "benchmark_report_20200101_000000.json").write_text('{"schema_version": "1.1", "rep')
    (reports / "benchmark_report_20200101_000001.json").write_text("[1, 2, 3]")
    (reports / ".benchmark_report_20200101_000002.json.abc.tmp").write_text("{")
    (reports / "baselines.json").write_text("{not json")
    assert client.post("/reports", json=body()).status_code == 200
    assert len(client.get("/reports").json()) == 1 and client.get("/baselines").json() == {}


def test_openapi_documents_every_endpoint(client_for: Callable[..., TestClient]) -> None:
    """FastAPI's OpenAPI lists health, readings, metrics, windows, reports and baselines."""
    paths = client_for(FakeNvml()).get("/openapi.json").json()["paths"]
    for path in ("/health", "/resources", "/metrics", "/windows/start", "/windows/{window_id}/stop", "/reports",
                 "/reports/{report_id}", "/baselines", "/baselines/{name}"):
        assert path in paths, path


def test_concurrent_report_builds_do_not_clobber(tmp_path: Path) -> None:
    """Builds running at once each get their own files, and each later one compares with an earlier one."""
    import threading

    svc = make_service(make_settings(tmp_path), FakeNvml())
    results: list[str] = []

    def build() -> None:
        results.append(svc.build_and_write(BuildReportRequest.model_validate(body())).report_path)

    threads = [threading.Thread(target=build) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 4 and len(svc.store.list()) == 4
    assert len(list((tmp_path / "reports").glob("*.html"))) == 4
    assert sum("vs_previous" in r.comparison for r in svc.store.list()) == 3
