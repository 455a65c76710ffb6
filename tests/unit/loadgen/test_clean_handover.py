"""A clean hand-over between runs (issue 34): a request the benchmark gives up on closes its connection, so the
server aborts it (vLLM aborts a request whose client went away) instead of keeping the engine busy for the next run.
Against the mock server in a child process, whose ``vllm:num_requests_running`` drops when a client disconnects."""

from __future__ import annotations

import _thread
import threading
from pathlib import Path

import gevent
import pytest

from core.requestlog import RequestLog
from core.settings import Settings
from loadgen.errors import WarmupInterrupted
from loadgen.locust_side import user_actions as driver
from loadgen.locust_side.process_state import RunState
from loadgen.orchestrate.measured_run import read_records, warmup
from loadgen.plan import bench_config
from loadgen.request.client import new_session
from tests.unit.loadgen.mock_process import mock_process, running, running_after

SLOW_STREAM = ("--metrics", "--tokens", "200", "--ttft-ms", "100", "--itl-ms", "200")  # 40 s per answer


def plan_for(url: str, **knobs: int) -> RunState:
    settings = Settings(_env_file=None, vllm_base_url=url, max_tokens=200, **knobs)  # type: ignore[call-arg, arg-type]
    return RunState(bench_config(settings, "mock-model"), RequestLog(Path("/dev/null")))


def test_requests_cut_by_the_end_of_the_run_close_their_connections(tmp_path: Path) -> None:
    """4 users mid-stream when the run's end kills them (Locust's GreenletExit): their rows are cut keeping what they
    received, and the server sees all 4 go at once (running 4 -> 0), not after their 40 s answers."""
    with mock_process(*SLOW_STREAM) as url:
        state = plan_for(url, requests=4, concurrency=4)
        state.begin(0, tmp_path / "rows.jsonl")
        sessions = [new_session() for _ in range(4)]
        users = [gevent.spawn(driver.send, state, s, url, state.item(k)) for k, s in enumerate(sessions)]
        gevent.sleep(0.8)  # every answer has begun streaming
        assert running(url) == 4
        gevent.killall(users, block=True)
        assert running_after(url, 0.0, within_s=3.0) == 0.0
        rows, _ = read_records(tmp_path / "rows.jsonl")
        assert [r.error_kind for r in rows] == ["incomplete"] * 4 and all(r.content_chunks >= 1 for r in rows)
        for session in sessions:
            session.close()


def test_ctrl_c_in_the_warmup_aborts_its_requests_and_keeps_their_rows(tmp_path: Path) -> None:
    """Ctrl-C while 3 warmup requests stream: their connections are shut down (the server's running requests drop
    to 0 at once, while the benchmark still writes its report), their rows are saved as cut by Ctrl-C, and the
    warmup says it was interrupted."""
    with mock_process(*SLOW_STREAM) as url:
        state = plan_for(url, warmup=3, concurrency=3)
        rows_file = tmp_path / "run.requests.jsonl"
        seen: list[float] = []

        def ctrl_c() -> None:
            seen.append(running_after(url, 3.0, within_s=5.0))
            _thread.interrupt_main()

        threading.Thread(target=ctrl_c, daemon=True).start()
        try:
            warmup(state.plan, rows_file)
        except KeyboardInterrupt:
            pytest.fail("Ctrl-C left the warmup as it was: its requests kept streaming, its rows were not saved")
        except WarmupInterrupted as exc:
            assert "interrupted during the warmup" in str(exc)
        else:
            pytest.fail("the warmup ended although Ctrl-C stopped it")
        assert seen == [3.0] and running_after(url, 0.0, within_s=3.0) == 0.0
        rows, _ = read_records(rows_file)
        assert len(rows) == 3 and all(r.phase == "warmup" and r.error_kind == "incomplete" for r in rows)
        assert all((r.error or "").startswith("cancelled by Ctrl-C") for r in rows)
