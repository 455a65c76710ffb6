"""What Locust is told about LLM requests: one request per chat request, LLM figures apart (merged across workers
exactly as one process), and requests cut by a stop logged as cut. Locust's statistics module is imported without
gevent's monkey-patching (LOCUST_SKIP_MONKEY_PATCH), which must not leak into pytest's process."""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import gevent
import pytest

from core.records import RequestRecord
from core.requestlog import RequestLog
from core.settings import Settings
from loadgen.locust_side import user_actions as driver
from loadgen.locust_side.process_state import RunState
from loadgen.locust_side.user_actions import RequestCut, cut_event, request_event
from loadgen.plan import bench_config


@pytest.fixture(scope="module")
def llm_stats() -> Iterator[ModuleType]:
    """``loadgen.locust_side.llm_stats``, imported with Locust's monkey-patching switched off."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOCUST_SKIP_MONKEY_PATCH", "1")
        yield importlib.import_module("loadgen.locust_side.llm_stats")


def over_the_wire(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` after Locust's worker -> master transport (its msgpack ``Message``), as a master receives it."""
    protocol = importlib.import_module("locust.rpc.protocol")
    message = protocol.Message("stats", {"llm_stats": data}, "worker-1")
    received: dict[str, Any] = protocol.Message.unserialize(message.serialize()).data["llm_stats"]
    return received


def row(
    tokens: int = 11, ttft_ms: float = 400.0, e2e_ms: float = 900.0, ok: bool = True, **extra: Any
) -> RequestRecord:
    """A finished request: ``tokens`` output tokens, one 50 ms gap per token after the first."""
    fields: dict[str, Any] = {
        "request_id": "r",
        "started_at": 1000.0,
        "ok": ok,
        "ttft_ms": ttft_ms,
        "e2e_ms": e2e_ms,
        "output_tokens": tokens,
        "itl_ms": [50.0] * (tokens - 1),
    }
    if not ok:
        fields.update(error_kind="timeout", error="no chunk within 5 s")
    return RequestRecord(**{**fields, **extra})


def test_one_locust_request_per_chat_request() -> None:
    """A chat request is one ``LLM e2e`` entry (latency in ms, no size in 'bytes'); TTFT etc. are not requests."""
    event = request_event(row())
    assert (event["request_type"], event["name"], event["response_time"]) == ("LLM", "e2e", 900.0)
    assert event["response_length"] == 0 and event["exception"] is None
    failed = request_event(row(ok=False))
    assert str(failed["exception"]) == "timeout: no chunk within 5 s"


def test_cut_request_is_a_failure_that_says_so() -> None:
    """A request cut by the stop is a failed ``LLM e2e`` with its elapsed time and a cause naming the stop."""
    event = cut_event(1234.5)
    assert (event["name"], event["response_time"]) == ("e2e", 1234.5)
    assert isinstance(event["exception"], RequestCut) and "stop" in str(event["exception"])


def test_llm_figures_in_their_units(llm_stats: ModuleType) -> None:
    """TTFT/TPOT/ITL in ms, decode speed in tok/s, output tokens per request; a failed request adds nothing."""
    stats = llm_stats.LlmStats(clock=lambda: 5000.0)
    stats.add(row(tokens=11, ttft_ms=400.0, e2e_ms=900.0))  # TPOT (900 - 400) / 10 = 50 ms -> 20 tok/s
    stats.add(row(ok=False))
    rows = {r["name"].split(" ")[0]: r for r in stats.latency_rows()}
    assert rows["TTFT"]["unit"] == "ms" and rows["TTFT"]["count"] == 1 and rows["TTFT"]["avg"] == 400.0
    assert rows["TPOT"]["avg"] == 50.0 and rows["ITL"]["count"] == 10 and rows["ITL"]["median"] == 50.0
    assert rows["Decode"]["unit"] == "tok/s" and rows["Decode"]["avg"] == 20.0
    assert rows["Output"]["unit"] == "tokens" and rows["Output"]["avg"] == 11.0
    assert stats.output_tokens == 11


def test_open_loop_ttft_counts_from_the_schedule(llm_stats: ModuleType) -> None:
    """In open loop TTFT includes the time the request waited for the client, as the e2e entry does."""
    stats = llm_stats.LlmStats()
    stats.add(row(ttft_ms=400.0, scheduled_at=999.9))  # sent 100 ms late
    (ttft,) = [r for r in stats.latency_rows() if r["name"].startswith("TTFT")]
    assert ttft["avg"] == pytest.approx(500.0)
    event = request_event(row(e2e_ms=900.0, scheduled_at=999.9))
    assert event["response_time"] == pytest.approx(1000.0)


def test_two_workers_merge_to_what_one_process_shows(llm_stats: ModuleType) -> None:
    """Workers' reports (deltas since their last report) merged on a master equal one process that saw it all."""
    rows = [row(tokens=n, ttft_ms=100.0 + 37 * n, e2e_ms=2000.0 + 91 * n) for n in range(2, 40)]
    single = llm_stats.LlmStats(clock=lambda: 5000.0)
    workers = [llm_stats.LlmStats(clock=lambda: 5000.0) for _ in range(2)]
    master = llm_stats.LlmStats(clock=lambda: 5010.0)
    for index, record in enumerate(rows):
        single.add(record)
        workers[index % 2].add(record)
        if index % 7 == 0:  # reports arrive now and then, and reset the worker's share
            for worker in workers:
                master.merge(over_the_wire(worker.report()))
    single.add_cut()
    workers[1].add_cut()
    for worker in workers:
        master.merge(over_the_wire(worker.report()))
    assert master.latency_rows() == single.latency_rows()
    assert master.output_tokens == single.output_tokens == sum(r.output_tokens or 0 for r in rows)
    assert master.requests_cut == 1
    assert workers[0].report()["entries"] == [] and workers[0].output_tokens == 0  # nothing sent twice


def test_tokens_per_second_overall_and_over_the_last_ten_seconds(llm_stats: ModuleType) -> None:
    """Output tok/s is the tokens over the test's elapsed time, and over the last 10 complete seconds."""
    now = [999.5]
    stats = llm_stats.LlmStats(clock=lambda: now[0])  # the test starts at 999.5
    for second in range(20):  # 30 tokens end every second for 20 s
        now[0] = 1000.0 + second
        stats.add(row(tokens=30))
    now[0] = 1020.5
    values = {r["name"]: r["value"] for r in stats.throughput_rows(elapsed_s=20.0)}
    assert values["Output tokens (all requests)"] == 600
    assert values["Output tok/s since the test started"] == 30.0
    assert values["Output tok/s, last 10 s"] == 30.0
    now[0] = 1004.2  # 4 s in: the window holds only the test's complete seconds (1000-1001), not empty ones before
    early = llm_stats.LlmStats(clock=lambda: now[0])
    early.started_s = 999.5
    early.tokens_by_second.update({1000: 30, 1001: 30})
    assert early.current_tokens_per_s() == 30.0
    now[0] = 1001.0
    assert early.current_tokens_per_s() is None  # nothing complete yet


def test_text_table_names_units(llm_stats: ModuleType) -> None:
    """The end-of-run table printed by a headless run lists the metrics with their units."""
    stats = llm_stats.LlmStats()
    stats.add(row())
    table = stats.text_table(elapsed_s=1.0)
    assert "TTFT" in table and " tok/s " in table and "Requests cut by a stop" in table


@pytest.fixture
def run_state(tmp_path: Path) -> RunState:
    """A Locust process's run state writing ``requests.jsonl`` and rows under ``tmp_path``."""
    plan = bench_config(Settings(_env_file=None, requests=5), "m")  # type: ignore[call-arg]
    state = RunState(plan, RequestLog(tmp_path / "requests.jsonl"))
    state.begin(0, tmp_path / "rows.jsonl")
    return state


def test_request_cut_by_the_stop_is_logged_cancelled_and_reported(
    run_state: RunState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the test stops mid-stream (the user's greenlet is killed), the request is an ``incomplete`` row (counted
    apart by the report), a ``cancelled`` line in requests.jsonl, and reported through ``on_cut``."""

    def streaming_forever(*args: Any, **kwargs: Any) -> RequestRecord:
        gevent.sleep(60)
        raise AssertionError("not killed")

    monkeypatch.setattr(driver, "stream_chat", streaming_forever)
    cuts: list[float] = []
    item = run_state.item(0)
    user = gevent.spawn(driver.send, run_state, None, "http://vllm", item, None, cuts.append)
    gevent.sleep(0.05)
    user.kill(block=True)
    assert isinstance(user.value, gevent.GreenletExit) and len(cuts) == 1 and cuts[0] >= 40
    (line,) = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert line["status"] == "cancelled" and line["error"].startswith("incomplete: cancelled by the end of the run")
    assert line["source"] == "loadtest" and line["total_ms"] == pytest.approx(cuts[0], abs=1e-6)
    (row,) = [RequestRecord.model_validate_json(x) for x in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert row.error_kind == "incomplete" and not row.ok
    assert row.e2e_ms == cuts[0]  # one figure for the row and Locust's stats (once 33 ms apart on a busy host)
