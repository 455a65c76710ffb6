"""Nothing collected is lost (issue 34): every run that sent requests gets a report of what it has — every request
cut by the run's end, every request failed, Ctrl-C — marked for what it is (never a baseline, a gate's reference or
the next run's previous) and saying so where the seed says ``Baseline saved``. The sidecar runs in-process (FastAPI
TestClient, no sockets); the benchmark's sidecar client talks to it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from core.records import RequestRecord
from core.report_schema import BenchmarkConfig
from core.requestlog import RequestLog
from core.settings import Settings
from loadgen.errors import BenchError
from loadgen.orchestrate.measured_run import Measured
from loadgen.orchestrate.outcome import EXIT_INTERRUPTED, EXIT_NO_SUCCESS
from loadgen.orchestrate.pipeline import finish_run, report_run
from loadgen.sidecar_client import SidecarClient
from tests.unit.sidecar.test_sidecar_app import BASE_URL, TOKEN, body, client_for, make_settings  # noqa: F401

CUT = "cancelled by the end of the run (GreenletExit)"


def in_process_sidecar(monkeypatch: pytest.MonkeyPatch, app: TestClient) -> SidecarClient:
    """The benchmark's sidecar client, its HTTP calls answered by ``app`` (the real sidecar, in-process)."""

    def route(method: str) -> Callable[..., httpx.Response]:
        real = getattr(httpx, method)

        def call(url: str, **kwargs: Any) -> httpx.Response:
            if not url.startswith(BASE_URL):  # the sidecar's own calls (vLLM's /metrics): as they were
                return real(url, **kwargs)
            kwargs.pop("timeout", None)
            return getattr(app, method)(url.removeprefix(BASE_URL), **kwargs)

        return call

    for method in ("get", "post", "put"):
        monkeypatch.setattr(httpx, method, route(method))
    return SidecarClient(BASE_URL, token=TOKEN)


def row(i: int, start: float, **fields: Any) -> RequestRecord:
    """A measured row sent at ``start + i`` s (ok unless ``fields`` say otherwise)."""
    values: dict[str, Any] = {"ok": True, "ttft_ms": 50.0, "e2e_ms": 500.0, "itl_ms": [10.0] * 9,
                              "output_tokens": 10, "content_chunks": 10, "max_tokens": 16, **fields}  # fmt: skip
    return RequestRecord(request_id=f"r{i}", started_at=start + i * 0.01, **values)


def cut_row(i: int, start: float, first_token: bool) -> RequestRecord:
    """A measured row cut after 60 s in flight, with the TTFT and chunks it had received when it had any."""
    received: dict[str, Any] = {"ttft_ms": 41_000.0 + i, "content_chunks": 3, "output_chars": 6} if first_token else {}
    return row(i, start, ok=False, e2e_ms=60_000.0, itl_ms=[], output_tokens=None, error_kind="incomplete", error=CUT,
               **{"content_chunks": 0, "ttft_ms": None, **received})  # fmt: skip


def warmup_rows(start: float) -> list[RequestRecord]:
    return [row(100 + i, start - 5, phase="warmup") for i in range(2)]


def plan_of(concurrency: int) -> BenchmarkConfig:
    return BenchmarkConfig.model_validate(body(concurrency=concurrency)["config"]).model_copy(
        update={"duration_s": 60.0, "requests": 0}
    )


def measured(records: list[RequestRecord], start: float, interrupted: bool = False) -> Measured:
    return Measured(records, start, start + 61.0, interrupted=interrupted,
                    gaps=["server cross-check skipped: test"])  # fmt: skip


def report_and_finish(
    settings: Settings, sidecar: SidecarClient, run: Measured, tmp_path: Path, plan: BenchmarkConfig
) -> tuple[int, Any]:
    rows_file = tmp_path / "logs" / "runs" / "20260101_120000.requests.jsonl"
    rows_file.parent.mkdir(parents=True, exist_ok=True)
    rows_file.write_text("".join(r.model_dump_json() + "\n" for r in run.records), encoding="utf-8")
    done = report_run(settings, plan, sidecar, run, rows_file)
    assert done.report is not None, done.error
    return finish_run(settings, sidecar, done), done


def test_a_run_whose_every_request_was_cut_is_reported_and_is_no_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client_for: Any, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    """`--concurrency 32 --duration 60` on a slow host: all 32 measured requests cut. The report holds them (20
    with a first token, their TTFT), the warmup rows and no made-up figures (error rate null, latencies null);
    ``--baseline`` is not marked, the terminal says ``Report saved to … (not a baseline: …)``, exit 4, and ``make
    baseline`` refuses it."""
    settings = make_settings(tmp_path, baseline="v1")
    sidecar = in_process_sidecar(monkeypatch, client_for(settings=settings))
    start = time.time() - 70
    rows = [cut_row(i, start, first_token=i < 20) for i in range(32)] + warmup_rows(start)
    code, done = report_and_finish(settings, sidecar, measured(rows, start), tmp_path, plan_of(32))
    out = capsys.readouterr()
    assert code == EXIT_NO_SUCCESS
    m = done.report.metrics
    assert (m.requests_total, m.requests_incomplete, m.error_rate_percent, m.latency_p99_ms) == (0, 32, None, None)
    assert m.cut.with_first_token == 20 and m.cut.ttft.count == 20 and m.cut.content_chunks == 60
    assert m.key_insight.startswith("No measured request ended: all 32 sent were cut after up to 60 s in flight")
    saved = [line for line in out.out.splitlines() if line.startswith("[REPORT] ") and " saved to " in line]
    assert saved == [f"[REPORT] Report saved to {done.path} (not a baseline: had all its 32 requests cut by its end "
                     "(none ended within DURATION and DRAIN_S); run longer or with less load)"]  # fmt: skip
    assert "Baseline saved" not in out.out and "[WARN] baseline v1 not marked: " in out.out
    assert "[ERROR] No measured request succeeded (0 failed, 32 cut by the run's end): see errors and the cut " \
           "requests." in out.err
    assert "[RESULT] Cut by the run's end: 32 (the end of the run 32) after up to 60 s in flight; 20 had a first " \
           "token" in out.out and "Requests: 0/0 ok | errors n/a | 32 incomplete" in out.out
    rows_written = Path(done.path).with_name(done.report.requests_file).read_text(encoding="utf-8").splitlines()
    assert len(rows_written) == 34  # the cut rows and the warmup
    markdown = Path(done.path).with_suffix(".md").read_text(encoding="utf-8")
    assert "Not a baseline: had all its 32 requests cut by its end" in markdown
    with pytest.raises(BenchError, match="is no baseline"):
        sidecar.mark_baseline("v1", done.report.report_id)  # make baseline NAME=v1 REPORT=<it>


@pytest.mark.parametrize(
    ("what", "rows", "interrupted", "code", "why"),
    [
        ("every request failed", lambda s: [row(i, s, ok=False, ttft_ms=None, output_tokens=None, error_kind="http_status",
                                                 error="HTTP 500", http_status=500) for i in range(10)],
         False, EXIT_NO_SUCCESS, "has no successful request"),
        ("Ctrl-C", lambda s: [row(i, s) for i in range(3)] + [cut_row(i, s, True) for i in range(3, 8)],
         True, EXIT_INTERRUPTED, "was interrupted (Ctrl-C) before its planned end"),
    ],
)  # fmt: skip
def test_a_failed_or_interrupted_run_is_reported_and_is_no_baseline(
    what: str, rows: Callable[[float], list[RequestRecord]], interrupted: bool, code: int, why: str,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client_for: Any, capsys: pytest.CaptureFixture[str],  # noqa: F811
) -> None:  # fmt: skip
    """A run whose every request failed (exit 4) and one stopped by Ctrl-C (exit 130) are reported with their rows
    and errors by cause, and their ``[REPORT]`` line says why they are no baseline instead of ``Baseline saved``."""
    settings = make_settings(tmp_path, baseline="v1")
    sidecar = in_process_sidecar(monkeypatch, client_for(settings=settings))
    start = time.time() - 70
    got, done = report_and_finish(settings, sidecar, measured(rows(start), start, interrupted), tmp_path, plan_of(4))
    out = capsys.readouterr().out
    assert got == code, what
    assert f"[REPORT] Report saved to {done.path} (not a baseline: {why}" in out and "Baseline saved" not in out
    if not interrupted:
        assert done.report.errors.by_kind == {"http_status": 10} and done.report.metrics.error_rate_percent == 100.0
    with pytest.raises(BenchError, match="is no baseline"):
        sidecar.mark_baseline("v1", done.report.report_id)


def test_a_run_that_can_be_a_baseline_keeps_the_seeds_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client_for: Any, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    """A good run still prints the seed's ``[REPORT] Baseline saved to <path>`` and is marked."""
    settings = make_settings(tmp_path, baseline="v1")
    sidecar = in_process_sidecar(monkeypatch, client_for(settings=settings))
    start = time.time() - 70
    code, done = report_and_finish(settings, sidecar, measured([row(i, start) for i in range(12)], start), tmp_path,
                                   plan_of(4))  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and f"[REPORT] Baseline saved to {done.path}" in out.splitlines()
    assert f"[BASELINE] v1 -> {done.report.report_id}" in out


@pytest.mark.parametrize(
    ("ending", "code"), [("warmup failed", EXIT_NO_SUCCESS), ("Ctrl-C", EXIT_INTERRUPTED), ("over capacity", 2)]
)
def test_a_run_that_sent_only_its_warmup_is_reported(
    ending: str, code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client_for: Any,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Every warmup request failed (exit 4, the run's own error line), Ctrl-C stopped the warmup (exit 130) or the
    warmup showed the load would time out (exit 2, the refusal): the warmup's rows are reported with their errors by
    cause and why the measured run was not started; no baseline."""
    from loadgen.errors import OverCapacity, WarmupFailed, WarmupInterrupted
    from loadgen.orchestrate import pipeline

    settings = make_settings(tmp_path, baseline="v1")
    sidecar = in_process_sidecar(monkeypatch, client_for(settings=settings))
    start = time.time() - 10
    why = {
        "warmup failed": WarmupFailed("every warmup request failed (3 of 3). The measured run was not started."),
        "Ctrl-C": WarmupInterrupted("interrupted during the warmup; the measured run was not started"),
        "over capacity": OverCapacity("50 users would wait 445 s for their first tokens: the measured run was not "
                                      "started"),
    }[ending]  # fmt: skip

    def warmup_only(settings: Settings, plan: BenchmarkConfig, records_path: Path, *_: Any) -> Measured:
        rows = [row(i, start, phase="warmup", ok=False, ttft_ms=None, output_tokens=None, error_kind="http_status",
                    error="max_tokens=99999 cannot be greater than max_model_len=4096", http_status=400)
                for i in range(3)]  # fmt: skip
        records_path.write_text("".join(r.model_dump_json() + "\n" for r in rows), encoding="utf-8")
        raise why

    monkeypatch.setattr(pipeline, "run_measured", warmup_only)
    done = pipeline.point_runner(settings, sidecar, None)(plan_of(4))  # type: ignore[arg-type]
    got = finish_run(settings, sidecar, done)
    out = capsys.readouterr()
    assert got == code
    assert "(not a baseline: sent no measured request" in out.out or "(not a baseline: was interrupted" in out.out
    assert "Baseline saved" not in out.out
    (path,) = (tmp_path / "reports").glob("benchmark_report_*.json")
    report = json.loads(path.read_text(encoding="utf-8"))
    assert report["errors"]["by_kind"] == {"http_status": 3} and report["metrics"]["requests_total"] == 0
    assert any("measured run was not started" in g and "(the errors are the warmup's)" in g for g in report["gaps"])
    if ending != "Ctrl-C":
        assert f"[ERROR] {why}" in out.err and done.report is None  # the run's own line; no point of a series


def test_a_run_without_any_row_is_still_refused(client_for: Any, tmp_path: Path) -> None:  # noqa: F811
    """Nothing sent, nothing to report: a run whose rows file holds no row at all is a 422, nothing written."""
    client = client_for(settings=make_settings(tmp_path))
    payload = body(n=2)
    (tmp_path / "logs" / "runs" / f"{payload['run_id']}.requests.jsonl").write_text("")
    answer = client.post("/reports", json=payload)
    assert answer.status_code == 422 and "no request row" in answer.text
    assert not list((tmp_path / "reports").glob("benchmark_report_*.json"))


def test_a_run_cut_whole_by_its_duration_against_the_mock_is_reported_and_refused_as_a_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client_for: Any, capsys: pytest.CaptureFixture[str],  # noqa: F811
) -> None:  # fmt: skip
    """4 users for 1 s against a server whose answers take 40 s: the run's end cuts all 4 mid-stream. The report is
    written from the rows, the server's /metrics and the cut requests' first tokens; it says it is no baseline,
    ``--baseline`` is not marked, ``make baseline`` refuses it, exit 4; the server saw the 4 go."""
    import gevent

    from loadgen.locust_side import user_actions as driver
    from loadgen.locust_side.process_state import RunState
    from loadgen.orchestrate.measured_run import read_records
    from loadgen.orchestrate.replica_watch import scrape_metrics
    from loadgen.plan import bench_config
    from loadgen.request.client import new_session
    from tests.unit.loadgen.mock_process import mock_process, running_after, running_in_gevent

    with mock_process("--metrics", "--tokens", "200", "--ttft-ms", "200", "--itl-ms", "200") as url:
        settings = make_settings(tmp_path, baseline="v1").model_copy(
            update={"vllm_base_url": url, "concurrency": 4, "duration": 1.0, "warmup": 0}
        )
        sidecar = in_process_sidecar(monkeypatch, client_for(settings=settings))
        plan = bench_config(settings, "mock-model")
        rows_file = tmp_path / "logs" / "runs" / "20260101_120000.requests.jsonl"
        rows_file.parent.mkdir(parents=True)
        state = RunState(plan, RequestLog(tmp_path / "requests.jsonl"))
        state.begin(0, rows_file)
        before, _ = scrape_metrics(url)
        start = time.time()
        users = [gevent.spawn(driver.send, state, new_session(), url, state.item(k)) for k in range(4)]
        assert running_in_gevent(url, 4.0) == 4.0
        gevent.sleep(1.0)  # TTFT 200 ms: every answer has sent its first tokens
        gevent.killall(users, block=True)  # DURATION (+ DRAIN_S 0) is over: Locust kills the users
        end = time.time()
        after, _ = scrape_metrics(url)
        assert running_after(url, 0.0, within_s=10.0) == 0.0
        records, _ = read_records(rows_file)
        code = finish_run(settings, sidecar, report_run(settings, plan, sidecar,
                                                        Measured(records, start, end, before, after), rows_file))
    out = capsys.readouterr().out
    assert code == EXIT_NO_SUCCESS
    (path,) = (tmp_path / "reports").glob("benchmark_report_*.json")
    report = json.loads(path.read_text(encoding="utf-8"))
    m = report["metrics"]
    assert (m["requests_total"], m["requests_incomplete"], m["error_rate_percent"]) == (0, 4, None)
    assert m["cut"]["with_first_token"] == 4 and m["cut"]["ttft"]["p50_ms"] >= 150 and report["server"] is not None
    assert f"[REPORT] Report saved to {path} (not a baseline: had all its 4 requests cut by its end" in out
    assert "[WARN] baseline v1 not marked: " in out and "Baseline saved" not in out
    with pytest.raises(BenchError, match="is no baseline"):
        sidecar.mark_baseline("v1", report["report_id"])
