"""A run that meets a dead server, SIGTERM and a second benchmark: the pure parts of the server-down breaker, the
connection back-off, the stop signals and the stack lock."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.api import BuildReportRequest
from core.records import RequestRecord
from core.serverview import ServerView
from loadgen.command.benchmark import RunLock, StackBusy, stop_signals_interrupt
from loadgen.locust_side.user_actions import CONNECTION_BACKOFF_S, backoff_s
from loadgen.orchestrate import locust_run
from loadgen.orchestrate.locust_run import EngineProbe, RowWatch, ServerDownBreaker, connection_cause
from loadgen.orchestrate.measured_run import Measured
from loadgen.orchestrate.pipeline import RunResult, build_request, disagreement, run_line, run_series
from tests.unit.loadgen.test_sweep_plan import knobs
from tests.unit.sidecar.test_sidecar_app import body, client_for  # noqa: F401  (fixture)
from tests.unit.sidecar.test_sidecar_store import report

REFUSED = "ConnectionRefusedError: [Errno 111] Connection refused"


def row(i: int, at: float, ok: bool = False, kind: str | None = "connection", error: str = REFUSED) -> str:
    """One rows-file line as the load processes write it (compact JSON)."""
    record = RequestRecord(
        request_id=f"r{i}", started_at=at, ok=ok, e2e_ms=1.0, error_kind=None if ok else kind,  # type: ignore[arg-type]
        error=None if ok else error, output_tokens=3 if ok else 0,
    )  # fmt: skip
    return record.model_dump_json() + "\n"


def test_connection_causes_are_named() -> None:
    """Refused, reset and DNS failures are told apart in the breaker's line."""
    assert connection_cause(REFUSED) == "connection refused"
    assert connection_cause("stream broken: ConnectionResetError: [Errno 104] Connection reset by peer") == (
        "connection reset"
    )
    assert connection_cause("gaierror: [Errno -2] Name or service not known") == "DNS lookup failed"
    assert connection_cause("connection closed before the end of the answer") == "connection failed"


def test_breaker_trips_after_server_down_s_of_connection_failures_only() -> None:
    """Failures spanning SERVER_DOWN_S trip it; a success or an HTTP error answer in between starts over."""
    breaker = ServerDownBreaker(5.0)
    assert breaker.failed(100.0, REFUSED) is None
    assert breaker.failed(104.0, REFUSED) is None
    breaker.answered()  # e.g. an HTTP 500: the server is up
    assert breaker.failed(106.0, REFUSED) is None
    assert breaker.failed(110.9, REFUSED) is None
    down = breaker.failed(111.0, REFUSED)
    assert down is not None and down.since == 106.0 and down.for_s == 5.0
    assert down.line().startswith("vLLM stopped answering at ") and down.line().endswith(": connection refused for 5 s")


def test_engines_that_stop_answering_health_trip_the_breaker_while_every_stream_hangs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A vLLM stopped with SIGTERM keeps its streams open with its engine core gone, so no row fails: probes of
    ``/health`` that are refused (or answer 503) for SERVER_DOWN_S trip the breaker; an engine answering anything else
    (200, or 404 from a server without ``/health``) is up and starts it over; the URLs are read at each probe."""
    answers: dict[str, Any] = {}

    def fake_get(url: str, timeout: float) -> Any:
        answer = answers[url]
        if isinstance(answer, Exception):
            raise answer
        return httpx.Response(answer)

    monkeypatch.setattr(locust_run.httpx, "get", fake_get)
    now = [100.0]
    urls = ["http://e0:8110"]
    probe = EngineProbe(lambda: list(urls), ServerDownBreaker(5.0), clock=lambda: now[0])
    answers["http://e0:8110/health"] = httpx.ConnectError("[Errno 111] Connection refused")
    assert probe() is None
    now[0] = 104.0
    assert probe() is None
    answers["http://e0:8110/health"] = 404  # answered: up, the span starts over
    now[0] = 105.0
    assert probe() is None
    answers["http://e0:8110/health"] = httpx.ConnectError("[Errno 111] Connection refused")
    now[0] = 106.0
    assert probe() is None
    now[0] = 111.0
    down = probe()
    assert down is not None and down.since == 106.0
    assert down.line().endswith(": connection refused for 5 s"), down.line()
    urls[:] = ["http://e0:8111"]  # switched to the other slot: its answer counts, not the old one's
    answers["http://e0:8111/health"] = 503
    probe = EngineProbe(lambda: list(urls), ServerDownBreaker(5.0), clock=lambda: now[0])
    assert probe() is None
    now[0] = 117.0
    down = probe()
    assert down is not None and "its engine died (/health answers 503)" in down.line()
    answers["http://e0:8111/health"] = httpx.ReadTimeout("timed out")  # slow under load, not gone: no verdict
    probe = EngineProbe(lambda: list(urls), ServerDownBreaker(5.0), clock=lambda: now[0])
    assert probe() is None and probe.breaker.first is None
    urls[:] = []
    assert EngineProbe(lambda: list(urls), ServerDownBreaker(0.001))() is None  # no engine known: nothing to judge


def test_row_watch_counts_rows_and_feeds_the_breaker(tmp_path: Path) -> None:
    """Measured rows are counted as they are appended; a torn last line waits; only connection failures with no
    answer between them trip the breaker (warmup rows and HTTP errors do not)."""
    path = tmp_path / "run.requests.jsonl"
    watch = RowWatch(path, ServerDownBreaker(3.0))
    lines = [row(0, 100.0, ok=True), row(1, 101.0), row(2, 102.0, kind="http_status", error="HTTP 500"),
             row(3, 103.0), row(4, 105.0)]  # fmt: skip
    path.write_text("".join(lines) + '{"torn', encoding="utf-8")
    assert watch() == 5 and watch.down is None  # 103 -> 105: 2 s only, the 500 at 102 reset it
    with path.open("a", encoding="utf-8") as fh:
        fh.write('"}\n' + row(5, 105.5))
    assert watch() == 6 and watch.down is None  # the torn line is no row; 103 -> 105.5 is under 3 s
    with path.open("a", encoding="utf-8") as fh:
        fh.write(row(6, 110.0).replace('"phase":"measured"', '"phase":"warmup"'))
    assert watch() == 6 and watch.down is None  # warmup rows do not count
    with path.open("a", encoding="utf-8") as fh:
        fh.write(row(7, 106.0))
    assert (
        watch() == 7
        and watch.down is not None
        and watch.down.since == pytest.approx(103.001)
        and watch.down.for_s == pytest.approx(3.0)
    )


def test_the_routers_no_engine_answers_trip_the_breaker_like_refusals(tmp_path: Path) -> None:
    """Behind the stack's router a dead engine is answered by the router (503 No available workers, 500 error sending
    request): those trip the breaker, named; any other HTTP error still proves the server is up."""
    path = tmp_path / "run.requests.jsonl"
    watch = RowWatch(path, ServerDownBreaker(3.0))
    no_worker = "HTTP 503: No available workers (all circuits open or unhealthy)"
    sending = "HTTP 500: Request failed: error sending request for url (http://127.0.0.1:8110/v1/chat/completions)"
    path.write_text(row(0, 100.0, kind="http_status", error=sending) + row(1, 101.0, kind="http_status", error="x")
                    + row(2, 102.0, kind="http_status", error=no_worker)
                    + row(3, 105.5, kind="http_status", error=no_worker), encoding="utf-8")  # fmt: skip
    assert watch() == 4 and watch.down is not None and watch.down.since == pytest.approx(102.001)
    assert watch.down.line().endswith(": no engine answers behind the router for 4 s")


MODEL_GONE = 'HTTP 404: {"error":{"message":"The model `synthetic-tiny` does not exist.","type":"NotFoundError"}}'
"""vLLM 0.32's answer (``vllm/entrypoints/openai/models/serving.py``) to the run's model after a switch away."""


def test_a_switch_to_another_model_ends_the_run_like_a_dead_engine(tmp_path: Path) -> None:
    """After ``./start_vllm.sh`` switched the stack to another model, every request of the run gets vLLM's 404 "model
    does not exist": those trip the breaker (the run measures one model; a closed loop would flood the rows with
    404s), its line says the stack was switched; the users back off after each; another 404 proves the server up."""
    path = tmp_path / "run.requests.jsonl"
    watch = RowWatch(path, ServerDownBreaker(3.0))
    path.write_text(row(0, 100.0, kind="http_status", error="HTTP 404: Not Found")
                    + row(1, 101.0, kind="http_status", error=MODEL_GONE)
                    + row(2, 104.5, kind="http_status", error=MODEL_GONE), encoding="utf-8")  # fmt: skip
    assert watch() == 3 and watch.down is not None and watch.down.since == pytest.approx(101.001)
    assert "stopped serving the run's model" in watch.down.line() and "switched to another model" in watch.down.line()
    gone = RequestRecord(request_id="a", started_at=1.0, ok=False, error_kind="http_status", error=MODEL_GONE)
    other = RequestRecord(request_id="b", started_at=1.0, ok=False, error_kind="http_status", error="HTTP 404: x")
    assert backoff_s(gone) == CONNECTION_BACKOFF_S > 0 and backoff_s(other) == 0.0


def test_closed_loop_users_back_off_after_connection_failures_only() -> None:
    """A refused request, or the router's answer that no engine behind it answers, makes the user pause before the
    next one; a success or another HTTP error does not."""
    refused = RequestRecord(request_id="a", started_at=1.0, ok=False, error_kind="connection", error=REFUSED)
    http = RequestRecord(request_id="b", started_at=1.0, ok=False, error_kind="http_status", error="HTTP 500")
    ok = RequestRecord(request_id="c", started_at=1.0, ok=True, output_tokens=1)
    no_engine = RequestRecord(request_id="d", started_at=1.0, ok=False, error_kind="http_status",
                              error="HTTP 503: No available workers (all circuits open or unhealthy)")  # fmt: skip
    assert backoff_s(refused) == backoff_s(no_engine) == CONNECTION_BACKOFF_S > 0
    assert backoff_s(http) == backoff_s(ok) == 0.0


def run_of(tmp_path: Path, **fields: Any) -> tuple[BuildReportRequest, list[RequestRecord], Path]:
    """A build request of :func:`body` (``fields``), its rows and its rows file in ``tmp_path``."""
    request = BuildReportRequest.model_validate(body(runs_dir=tmp_path, **fields))
    path = tmp_path / f"{request.run_id}.requests.jsonl"
    return request, [RequestRecord.model_validate_json(line) for line in path.read_text().splitlines()], path


def test_build_request_carries_the_server_down_verdict_and_all_error_counts(tmp_path: Path) -> None:
    """A run ended by the breaker says so in its build request, with every row's error counted."""
    from loadgen.orchestrate.locust_run import ServerDown

    request, records, rows = run_of(tmp_path, n=4, error="HTTP 500")
    run = Measured(records, request.window_start, request.window_end,
                   server_down=ServerDown(time.time() - 3, "connection refused", 5.0))  # fmt: skip
    built = build_request(request.config, run, rows, knobs())
    assert built.server_down is not None and "connection refused for 5 s" in built.server_down
    assert built.run_id == request.run_id and "records" not in built.model_dump()
    assert built.errors is not None and built.errors.by_kind == {"http_status": 1}


def test_a_report_rebuilt_from_the_rows_of_a_run_the_server_ended_says_server_down(tmp_path: Path) -> None:
    """The verdict is kept beside the rows (``<run id>.ending.json``), so ``--report-from`` rebuilds a report that
    says the server went down; a run without the record, or with an unreadable one, reads as an ordinary run."""
    from loadgen.orchestrate.locust_run import ServerDown
    from loadgen.orchestrate.measured_run import from_records_file, write_ending
    from loadgen.plan import run_file

    request, _, rows = run_of(tmp_path, n=4, error="HTTP 500")
    assert from_records_file(rows).server_down is None
    down = ServerDown(time.time() - 3, "connection refused", 5.0)
    write_ending(rows, down)
    rebuilt = from_records_file(rows)
    assert rebuilt.server_down == down
    assert build_request(request.config, rebuilt, rows, knobs()).server_down == down.line()
    run_file(rows, ".ending.json").write_text("{not json", encoding="utf-8")
    assert from_records_file(rows).server_down is None


def test_a_report_rebuilt_from_the_rows_of_an_interrupted_run_says_interrupted(tmp_path: Path) -> None:
    """Ctrl-C is kept beside the rows too: ``--report-from`` rebuilds an interrupted run as interrupted (it can be
    no baseline); a run that ended as planned leaves no record."""
    from loadgen.orchestrate.measured_run import from_records_file, write_ending
    from loadgen.plan import run_file

    request, _, rows = run_of(tmp_path, n=4)
    write_ending(rows, None)
    assert not run_file(rows, ".ending.json").exists() and from_records_file(rows).interrupted is False
    write_ending(rows, None, interrupted=True)
    rebuilt = from_records_file(rows)
    assert rebuilt.interrupted is True and rebuilt.server_down is None
    assert build_request(request.config, rebuilt, rows, knobs()).interrupted is True


def test_sigterm_and_sighup_act_as_ctrl_c_while_running() -> None:
    """Inside the block SIGTERM and SIGHUP raise KeyboardInterrupt (the Ctrl-C path); the old handlers come back."""
    before = signal.getsignal(signal.SIGTERM)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        with pytest.raises(KeyboardInterrupt), stop_signals_interrupt():
            os.kill(os.getpid(), sig)
            time.sleep(1)
    assert signal.getsignal(signal.SIGTERM) is before


def test_sigint_inherited_ignored_still_interrupts_the_benchmark() -> None:
    """A benchmark started as a background job inherits SIGINT ignored: inside the block SIGINT interrupts all the
    same (``kill -INT``, the test harness's Ctrl-C); afterwards it is ignored again."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(KeyboardInterrupt), stop_signals_interrupt():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_second_benchmark_on_the_stack_is_refused_naming_the_holder(tmp_path: Path) -> None:
    """While one run holds RUN_DIR's lock, a second is refused with the holder's pid; after it, the lock is free."""
    with RunLock(tmp_path):
        with pytest.raises(StackBusy) as refused, RunLock(tmp_path):
            pass
        assert f"pid {os.getpid()}" in str(refused.value) and "wait for it to end" in str(refused.value)
    with RunLock(tmp_path):  # released on exit
        pass


def test_sweep_lines_and_series_notes_flag_a_client_server_disagreement() -> None:
    """A point whose report's cross-check disagrees says so on its console line and in the series' notes."""
    bad = report("benchmark_report_20260101_120001").model_copy(
        update={"server": ServerView.model_construct(disagreements=["requests_succeeded: client 10 vs server 14"])}
    )
    good = report("benchmark_report_20260101_120002")
    assert disagreement(good) is None and "client 10 vs server 14" in (disagreement(bad) or "")
    settings = knobs(sweep="concurrency:1,2", cooldown_s=0, duration=5)
    results = iter([RunResult(bad), RunResult(good)])
    lines: list[str] = []
    from loadgen.plan import bench_config

    runs = run_series(settings, bench_config(settings, "m"), lambda plan: next(results), out=lines.append)
    assert "WARNING client and server disagree" in lines[0] and "WARNING" not in lines[1]
    assert any("concurrency 1 run 1" in n and "client 10 vs server 14" in n for n in runs.notes)
    assert "WARNING" in run_line(runs.points[0], 1, 2, 1, 1, RunResult(bad))


def test_a_dead_server_ends_the_series(tmp_path: Path) -> None:
    """A point ended by the breaker stops the series; its note says why."""
    settings = knobs(sweep="concurrency:1,2,4", cooldown_s=0, duration=5)
    from loadgen.plan import bench_config

    results = iter([RunResult(report("benchmark_report_20260101_120001"), server_down="vLLM stopped answering")])
    runs = run_series(settings, bench_config(settings, "m"), lambda plan: next(results), out=lambda line: None)
    assert runs.server_down == "vLLM stopped answering" and len(runs.points) == 1
    assert any("ended early" in n for n in runs.notes)


def test_the_lock_falls_back_to_the_logs_when_run_dir_cannot_hold_it(tmp_path: Path) -> None:
    """A RUN_DIR where no file can be made (read-only in the compose Locust container; here: a file in its place)
    puts the lock in the fallback folder, still exclusive."""
    run_dir = tmp_path / "run"
    run_dir.write_text("not a folder")
    with RunLock(run_dir, tmp_path / "logs/runs") as held:
        assert held.path == tmp_path / "logs/runs/benchmark.lock"
        with pytest.raises(StackBusy), RunLock(run_dir, tmp_path / "logs/runs"):
            pass
