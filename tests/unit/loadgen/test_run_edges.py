"""Edges of a run: which model, which exit code, incomplete rows, open-loop arrivals that stop at DURATION."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from core.records import RequestRecord
from core.report_schema import BenchmarkConfig
from core.requestlog import RequestLog
from core.settings import Settings
from core.stats import run_metrics
from loadgen.errors import BenchError
from loadgen.locust_side.process_state import RunState
from loadgen.locust_side.user_actions import dispatch_open_loop
from loadgen.orchestrate import preflight
from loadgen.orchestrate.outcome import EXIT_ERROR_RATE, EXIT_NO_SUCCESS, verdicts
from loadgen.orchestrate.preflight import choose_model
from loadgen.workloads.workload import WorkItem
from tests.unit.sidecar.test_sidecar_store import report


def settings(**kw: object) -> Settings:
    return Settings(_env_file=None, **kw)  # type: ignore[call-arg, arg-type]


def test_model_choice_order_and_errors() -> None:
    """BENCH_MODEL, then SERVED_MODEL_NAME, then MODEL when served, then the only model; else stop and list."""
    served = ["base", "lora-a", "lora-b"]
    assert choose_model(served, settings(bench_model="lora-b", served_model_name="base")) == "lora-b"
    assert choose_model(served, settings(served_model_name="lora-a")) == "lora-a"
    assert choose_model(served, settings(model="base")) == "base"
    assert choose_model(["only"], settings()) == "only"
    with pytest.raises(BenchError, match="serves 3 models \\(base, lora-a, lora-b\\); choose one with BENCH_MODEL"):
        choose_model(served, settings())
    with pytest.raises(BenchError, match=r"BENCH_MODEL=nope is not served .*served: base, lora-a, lora-b"):
        choose_model(served, settings(bench_model="nope"))


def rows(ok: int, failed: int) -> list[RequestRecord]:
    good = [RequestRecord(request_id=f"o{i}", started_at=float(i), ok=True, e2e_ms=100.0, ttft_ms=10.0,
                          output_tokens=5, output_tokens_source="usage") for i in range(ok)]
    bad = [RequestRecord(request_id=f"f{i}", started_at=float(i), ok=False, e2e_ms=5.0, error_kind="http_status",
                         error="500") for i in range(failed)]
    return good + bad


def test_a_server_that_answers_but_cannot_serve_is_sent_to_start_vllm_not_make_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No answer at all: start the stack (`make up`); an answer of HTTP 503 (vLLM runs, its engine is gone): `make
    status` and `./start_vllm.sh`, since `make up` only says the stack already runs (new-user finding)."""
    answer: list[object] = [httpx.ConnectError("[Errno 111] Connection refused")]

    def fake_get(url: str, **_: object) -> httpx.Response:
        if isinstance(answer[0], Exception):
            raise answer[0]
        return httpx.Response(503, request=httpx.Request("GET", url))

    monkeypatch.setattr(preflight.httpx, "get", fake_get)
    monkeypatch.setattr(preflight.time, "sleep", lambda _s: None)
    with pytest.raises(BenchError, match="Start the stack with `make up`"):
        preflight._served(settings())
    answer[0] = 503
    with pytest.raises(BenchError, match=r"answered HTTP 503.*`make status`.*`\./start_vllm\.sh`") as raised:
        preflight._served(settings())
    assert "make up" not in str(raised.value)


def test_exit_codes_for_no_success_and_error_rate() -> None:
    """No successful request is exit 4; an error rate above MAX_ERROR_RATE_PCT is exit 5; a clean run has none."""
    none_ok = report().model_copy(update={"metrics": report().metrics.model_copy(update={"requests_ok": 0})})
    assert [code for code, _ in verdicts(settings(), none_ok)] == [EXIT_NO_SUCCESS]
    high = report().model_copy(update={"metrics": report().metrics.model_copy(update={"error_rate_percent": 12.0})})
    assert [code for code, _ in verdicts(settings(max_error_rate_pct=10), high)] == [EXIT_ERROR_RATE]
    assert verdicts(settings(max_error_rate_pct=20), high) == []


def test_incomplete_rows_are_counted_apart() -> None:
    """Requests cut by the end of the run are neither ok nor failed and stay out of the window and rates."""
    cut = RequestRecord(request_id="c", started_at=100.0, ok=False, e2e_ms=1.0, error_kind="incomplete", error="x")
    m = run_metrics([*rows(4, 1), cut])
    assert (m.requests_total, m.requests_ok, m.requests_failed, m.requests_incomplete) == (5, 4, 1, 1)
    assert m.error_rate_percent == 20.0 and m.duration_s < 10  # the cut row (t=100 s) does not stretch the window
    assert m.output_token_sources == {"usage": 4}


def plan(tmp_path: Path, **kw: object) -> BenchmarkConfig:
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "你好"}\n', encoding="utf-8")
    base: dict[str, object] = dict(mode="open_loop", concurrency=1, rate_req_per_sec=50.0, burstiness=1.0,
                                   warmup_requests=0, max_tokens=8, temperature=0.0, dataset=str(data), seed=0,
                                   vllm_url="http://x", model="m", drain_s=0.2)
    return BenchmarkConfig(**{**base, **kw})  # type: ignore[arg-type]


def test_open_loop_stops_scheduling_at_the_duration_and_cancels_after_the_drain(tmp_path: Path) -> None:
    """No arrival is scheduled after start + DURATION; requests still running after DRAIN_S are cancelled."""
    import gevent

    state = RunState(plan(tmp_path, duration_s=0.5), RequestLog(tmp_path / "requests.jsonl"))
    state.begin(0, None)
    scheduled: list[float] = []

    def one(item: WorkItem, at: float) -> None:
        scheduled.append(at)
        gevent.sleep(5.0)  # longer than the drain: cancelled at the end

    start = __import__("time").time()
    cancelled = dispatch_open_loop(state, one)
    assert scheduled and max(scheduled) <= start + 0.5 + 0.05
    assert 10 <= len(scheduled) <= 45  # about 25 arrivals at 50/s in 0.5 s (Poisson)
    assert cancelled == len(scheduled)


def test_open_loop_with_a_request_budget_sends_exactly_that_many(tmp_path: Path) -> None:
    """REQUESTS=N in open loop dispatches exactly N arrivals and waits for all of them."""
    state = RunState(plan(tmp_path, requests=7), RequestLog(tmp_path / "requests.jsonl"))
    state.begin(7, None)
    sent: list[float] = []
    assert dispatch_open_loop(state, lambda item, at: sent.append(at)) == 0
    assert len(sent) == 7


def test_row_counter_counts_new_complete_measured_rows_only(tmp_path: Path) -> None:
    """The progress counter reads only what was appended since its last count, and a half-written line later."""
    from loadgen.orchestrate.locust_run import RowWatch

    path = tmp_path / "rows.jsonl"
    path.write_text('{"phase":"warmup"}\n{"phase":"measured"}\n{"phase":"meas')
    count = RowWatch(path)
    assert count() == 1
    with path.open("a") as fh:
        fh.write('ured"}\n{"phase":"measured"}\n')
    assert count() == 3 and count() == 3 and count.offset == path.stat().st_size


def test_report_from_names_a_file_that_is_no_rows_file(tmp_path: Path) -> None:
    """--report-from: a missing file, a file outside LOGS_DIR/runs or not named by a run id (the sidecar reads rows by
    run id there), a dataset given by mistake and an empty file are bad input with the reason; a run's rows file (a
    torn last line included) is accepted."""
    from core.records import RequestRecord
    from loadgen.orchestrate.pipeline import rows_file_problem

    runs = tmp_path / "runs"
    runs.mkdir()
    assert "no such file" in (rows_file_problem(runs / "none.requests.jsonl", runs) or "")
    dataset = runs / "20260101_000001.requests.jsonl"
    dataset.write_text('{"prompt": "你好"}\n{"prompt": "再见"}\n', encoding="utf-8")
    assert "not a run's rows file (2 line(s)" in (rows_file_problem(dataset, runs) or "")
    empty = runs / "20260101_000002.requests.jsonl"
    empty.write_text("")
    assert "no request row" in (rows_file_problem(empty, runs) or "")
    rows = runs / "20260101_000000.requests.jsonl"
    row = RequestRecord(request_id="r0", started_at=1.0, ok=True, e2e_ms=5.0, output_tokens=1)
    rows.write_text(row.model_dump_json() + "\n" + '{"request_id": "torn', encoding="utf-8")
    assert rows_file_problem(rows, runs) is None
    for elsewhere in (tmp_path / rows.name, runs / "copy.requests.jsonl"):
        elsewhere.write_bytes(rows.read_bytes())
        assert "copy the file there" in (rows_file_problem(elsewhere, runs) or "")


def test_requests_cut_by_the_end_count_in_the_peak_concurrency() -> None:
    """Four successes one after another and two requests in flight from the start until the run's end cut them:
    three were in flight at once (the cut rows are left out of every rate, not of the concurrency)."""
    done = [RequestRecord(request_id=f"r{i}", started_at=float(i), ok=True, e2e_ms=900.0, ttft_ms=10.0,
                          output_tokens=4, prompt_tokens=3) for i in range(4)]  # fmt: skip
    cut = [RequestRecord(request_id=f"c{i}", started_at=0.0, ok=False, e2e_ms=4500.0, error_kind="incomplete",
                         error="cancelled") for i in range(2)]  # fmt: skip
    m = run_metrics([*done, *cut])
    assert m.peak_concurrency == 3 and m.requests_incomplete == 2 and m.requests_total == 4
