"""Several load processes as one run: shares that add up, one workload sequence, slots, how many processes, lag."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from core.report_schema import BenchmarkConfig
from core.requestlog import RequestLog
from loadgen.locust_side.process_state import LagMonitor, RunState, Slot, share, slots_for
from loadgen.locust_side.user_actions import arrivals
from loadgen.plan import auto_workers
from loadgen.request.sse import SSEParser, decode_chunk
from loadgen.selftest.mock_answers import MockConfig, build_answer


def plan(tmp_path: Path, **kw: object) -> BenchmarkConfig:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(f'{{"prompt": "题{i}", "task": "t{i % 3}"}}\n' for i in range(20)), encoding="utf-8")
    base: dict[str, object] = dict(concurrency=4, warmup_requests=0, max_tokens=64, output_len_mean=20.0,
                                   output_len_p95=50.0, temperature=0.0, dataset=str(data), seed=3,
                                   vllm_url="http://x", model="m")  # fmt: skip
    return BenchmarkConfig(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(("total", "slots"), [(25, 2), (7, 3), (1, 2), (0, 4), (100, 7)])
def test_shares_add_up_to_the_request_budget(total: int, slots: int) -> None:
    """Every process's share together is exactly REQUESTS, and no two processes differ by more than one."""
    shares = [share(total, Slot(i, slots)) for i in range(slots)]
    assert sum(shares) == total and max(shares) - min(shares) <= 1


def drain(state: RunState) -> list[tuple[int, int]]:
    out = []
    while (k := state.take_ticket()) is not None:
        item = state.item(k)
        out.append((k, item.max_tokens))
    return out


def test_processes_together_send_the_one_seeded_sequence(tmp_path: Path) -> None:
    """Request k is the k-th item of the seeded workload whichever process sends it; the numbers interleave."""
    single = RunState(plan(tmp_path), RequestLog(tmp_path / "log.jsonl"))
    single.begin(9, None)
    alone = drain(single)
    parts = []
    for i in range(2):
        state = RunState(plan(tmp_path), RequestLog(tmp_path / "log.jsonl"))
        state.begin(9, None, Slot(i, 2))
        parts.append(drain(state))
    assert [k for k, _ in parts[0]] == [0, 2, 4, 6, 8] and [k for k, _ in parts[1]] == [1, 3, 5, 7]
    assert sorted(parts[0] + parts[1]) == alone and len({t for _, t in alone}) > 1


def test_a_process_is_done_when_its_share_has_ended(tmp_path: Path) -> None:
    """all_done waits for the last issued request to end; without a budget a process is never done by count."""
    state = RunState(plan(tmp_path), RequestLog(tmp_path / "log.jsonl"))
    state.begin(3, None, Slot(1, 2))
    assert state.budget == 1 and state.take_ticket() == 1 and state.take_ticket() is None
    assert not state.all_done
    state.finished += 1
    assert state.all_done
    state.begin(0, None)
    assert state.budget is None and state.take_ticket() == 0 and not state.all_done


def test_slots_are_ordered_and_share_one_start() -> None:
    """Workers get slots 0..N-1 by id, all with the same schedule start a moment ahead."""
    slots = slots_for(["b", "a", "c"], now=100.0, delay_s=1.0)
    assert [(wid, s.slot, s.slots, s.start_at) for wid, s in sorted(slots.items())] == [
        ("a", 0, 3, 101.0), ("b", 1, 3, 101.0), ("c", 2, 3, 101.0)
    ]


@pytest.mark.parametrize(
    ("concurrency", "rate", "tokens", "requests", "cores", "expected"),
    [
        (50, None, 128, 200, 2, 1),  # this machine: one process
        (400, None, 200, None, 16, 7),  # the GPU host of the issue: 400 users
        (400, None, 200, None, 4, 2),  # capped at half the cores
        (3, None, 128, None, 16, 1),  # few users
        (400, None, 128, 5, 16, 5),  # never more processes than requests
        (1, 100.0, 200, None, 16, 1),  # open loop: 20k chunks/s per process
        (1, 500.0, 200, None, 16, 5),
        (1, 500.0, 200, None, 1, 1),
    ],
)
def test_automatic_workers_follow_the_load_and_the_cores(
    concurrency: int, rate: float | None, tokens: int, requests: int | None, cores: int, expected: int
) -> None:
    """WORKERS unset: one process per 64 users or 20k expected chunks/s, at most half the cores."""
    assert auto_workers(concurrency, rate, tokens, requests, cores) == expected


def test_a_stall_is_recorded_as_the_waits_of_events_arriving_during_it() -> None:
    """A 20 ms stall with a 5 ms interval counts 20, 15, 10 and 5 ms (events arriving during it wait that long)."""
    monitor = LagMonitor(busy=lambda: True, interval_s=0.005)
    monitor.record(0.0003)
    monitor.record(0.020)
    assert list(monitor.samples_ms) == pytest.approx([0.3, 20.0, 15.0, 10.0, 5.0])


def test_mock_answers_parse_into_the_tokens_asked_for() -> None:
    """The mock's pre-built answer: role chunk, content events of K tokens each, usage, [DONE], framed."""
    answer = build_answer(MockConfig(tokens=10, tokens_per_chunk=4), n=10, created=0)
    body, rest = b"", answer.whole
    while rest:  # undo the chunked framing
        size, _, rest = rest.partition(b"\r\n")
        body, rest = body + rest[: int(size, 16)], rest[int(size, 16) + 2 :]
    facts = [decode_chunk(d) for d in SSEParser().feed(body) if d != b"[DONE]"]
    assert [f.text for f in facts if f.text] == ["字" * 4, "字" * 4, "字" * 2]
    assert facts[-1].completion_tokens == 10 and body.endswith(b"data: [DONE]\n\n") and len(answer.content) == 3


def test_open_loop_slots_split_one_schedule(tmp_path: Path) -> None:
    """Two processes' arrivals interleave into exactly the one seeded schedule (same numbers, same offsets)."""
    open_plan = plan(tmp_path, rate_req_per_sec=20.0, burstiness=0.5, mode="open_loop")
    whole = list(itertools.islice(arrivals(open_plan, Slot()), 30))
    parts = [list(itertools.islice(arrivals(open_plan, Slot(i, 2)), 15)) for i in range(2)]
    assert sorted(parts[0] + parts[1]) == whole
    assert [k for k, _ in parts[1]] == list(range(1, 30, 2))


def test_a_distributed_run_has_a_private_master_port() -> None:
    """WORKERS > 1 binds the master to 127.0.0.1 on a free port (two runs on one host never share a master)."""
    from core.settings import Settings
    from loadgen.orchestrate.locust_launch import locust_argv

    argv = locust_argv(Settings(_env_file=None), headless=True, workers=2)  # type: ignore[call-arg]
    port = argv[argv.index("--master-bind-port") + 1]
    assert argv[argv.index("--processes") + 1] == "2" and argv[argv.index("--master-port") + 1] == port != "5557"
    assert argv[argv.index("--master-bind-host") + 1] == "127.0.0.1"
    assert "--processes" not in locust_argv(Settings(_env_file=None), headless=True)  # type: ignore[call-arg]


def test_a_conversation_turn_is_built_on_the_numbered_request(tmp_path: Path) -> None:
    """With SESSION_TURNS=2 request k of a user is a turn of its conversation, built on workload item k."""
    state = RunState(plan(tmp_path, session_turns=2), RequestLog(tmp_path / "log.jsonl"))
    state.begin(4, None)
    alone = RunState(plan(tmp_path), RequestLog(tmp_path / "log.jsonl"))
    alone.begin(4, None)
    items = [alone.item(k) for k in range(2)]
    user = object()
    first = state.next_item(user, 0)
    assert first.turn == 1 and first.prompt.messages == items[0].prompt.messages
    assert first.conversation is not None
    first.conversation.answered(first, True, "答")
    second = state.next_item(user, 1)
    assert second.turn == 2 and second.session_id == first.session_id
    assert second.prompt.messages[-2] == {"role": "assistant", "content": "答"}
    assert second.prompt.messages[-1]["content"] == items[1].prompt.messages[-1]["content"]
