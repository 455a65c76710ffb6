"""SIGINT to a Locust process cancels at once: the stop timeout (DRAIN_S of a closed-loop --duration run) becomes 0
before Locust's shutdown runs, and a request cut then names the early stop as its cause."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gevent
import pytest

from core.records import RequestRecord
from loadgen.locust_side import user_actions as driver
from loadgen.locust_side.process_state import RunState
from loadgen.locust_side.user_actions import CANCEL_CAUSE, cancel_on_sigint
from tests.unit.loadgen.test_locust_stats import run_state  # noqa: F401  (fixture)


@pytest.fixture
def restore_sigint() -> Any:
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh Locust process (other tests change it)
    yield
    signal.signal(signal.SIGINT, previous)


def test_sigint_sets_the_stop_timeout_to_zero_then_interrupts(restore_sigint: None) -> None:
    """DRAIN_S 30 s in force: SIGINT leaves 0 (Locust kills its users at once) and still raises KeyboardInterrupt."""
    env = SimpleNamespace(stop_timeout=30.0)
    marked: list[bool] = []
    cancel_on_sigint(env, lambda: marked.append(True))
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        gevent.sleep(0.1)
    assert env.stop_timeout == 0.0 and marked == [True]


def test_sigint_interrupts_even_where_it_was_ignored(restore_sigint: None) -> None:
    """A benchmark started as a background job passes SIGINT ignored to Locust: its stop must still stop it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    env = SimpleNamespace(stop_timeout=30.0)
    cancel_on_sigint(env)
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        gevent.sleep(0.1)
    assert env.stop_timeout == 0.0


def test_sigint_keeps_a_previous_handler(restore_sigint: None) -> None:
    seen: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    env = SimpleNamespace(stop_timeout=5.0)
    cancel_on_sigint(env)
    os.kill(os.getpid(), signal.SIGINT)
    gevent.sleep(0.1)
    assert seen == [signal.SIGINT] and env.stop_timeout == 0.0


def cut_row(
    run_state: RunState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: Any, after_s: float  # noqa: F811
) -> RequestRecord:
    """The row ``driver.send`` saves when its request (``stream`` stands in for ``stream_chat``) is killed after
    ``after_s`` by an early stop."""
    monkeypatch.setattr(driver, "stream_chat", stream)
    run_state.cut_cause = CANCEL_CAUSE
    user = gevent.spawn(driver.send, run_state, None, "http://vllm", run_state.item(0))
    gevent.sleep(after_s)
    user.kill(block=True)
    (row,) = [RequestRecord.model_validate_json(x) for x in (tmp_path / "rows.jsonl").read_text().splitlines()]
    return row


def test_a_request_cut_by_an_early_stop_names_it(
    run_state: RunState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    def streaming_forever(*args: Any, **kwargs: Any) -> RequestRecord:
        gevent.sleep(60)
        raise AssertionError("not killed")

    row = cut_row(run_state, tmp_path, monkeypatch, streaming_forever, 0.05)
    assert row.error_kind == "incomplete" and row.error == f"cancelled by {CANCEL_CAUSE} (GreenletExit)"
    assert row.ttft_ms is None and row.content_chunks == 0


def test_a_request_cut_mid_stream_keeps_what_it_received(
    run_state: RunState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """Three tokens arrived, then the run's end cut the request: its row keeps the TTFT, the two gaps, the chunks and
    characters (vLLM's TTFT and ITL histograms hold this request too, the cross-check compares them)."""
    from core.streamtiming import ChunkFacts, StreamTimer

    def three_tokens_then_stall(*args: Any, timer: StreamTimer, **kwargs: Any) -> RequestRecord:
        timer.start()
        for _ in range(3):
            gevent.sleep(0.02)
            timer.feed(ChunkFacts(text="ab", content="ab", token=True))
        gevent.sleep(60)
        raise AssertionError("not killed")

    row = cut_row(run_state, tmp_path, monkeypatch, three_tokens_then_stall, 0.2)
    assert row.error_kind == "incomplete" and not row.ok
    assert row.ttft_ms is not None and row.ttft_ms >= 15 and len(row.itl_ms) == 2 and all(g >= 15 for g in row.itl_ms)
    assert (row.content_chunks, row.output_chars) == (3, 6)
