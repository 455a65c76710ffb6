"""Multi-turn conversations: real follow-up turns from ShareGPT-style files, the history the model answered, think
times, both loops, and a real mock server that sees turn k+1 only after turn k's answer."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest

from core.distributions import parse_think_time, think_sampler
from core.requestlog import RequestLog
from core.settings import PROJECT_ROOT
from loadgen.locust_side.process_state import RunState, Slot
from loadgen.locust_side.user_actions import converse, dispatch_open_loop, send
from loadgen.request.client import new_session
from loadgen.selftest.mock_answers import TOKEN_TEXT, MockConfig
from loadgen.workloads.dataset import Prompt, load_dataset
from loadgen.workloads.workload import (
    ConversationDeck,
    Session,
    WorkItem,
    WorkloadSampler,
    followups_of,
    multi_turn_share,
    split_turns,
)
from tests.unit.loadgen.mock_in_loop import mock_in_thread
from tests.unit.loadgen.test_load_processes import plan


def conversations_file(folder: Path, count: int = 5, turns: int = 4) -> Path:
    """A ShareGPT JSONL of ``count`` conversations of ``turns`` human turns each (recorded gpt answers between),
    and one single-turn conversation."""
    lines = []
    for c in range(count):
        talk = [{"from": "system", "value": f"你是助手{c}"}]
        for t in range(turns):
            talk += [{"from": "human", "value": f"对话{c}的第{t + 1}问"}, {"from": "gpt", "value": f"录好的答{t + 1}"}]
        lines.append(json.dumps({"conversations": talk}, ensure_ascii=False))
    lines.append(json.dumps({"conversations": [{"from": "human", "value": "只问一次"}]}, ensure_ascii=False))
    path = folder / "talks.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def item(text: str = "x", max_tokens: int = 4) -> WorkItem:
    return WorkItem(Prompt("p", "t", [{"role": "user", "content": text}]), max_tokens)


def test_a_sharegpt_conversation_splits_into_its_system_prompt_and_real_user_turns(tmp_path: Path) -> None:
    """The loader keeps every turn; a session takes the system prompt and the human turns (not the recorded
    answers), and such a file plays its real follow-ups while single prompts draw theirs."""
    prompts = load_dataset(conversations_file(tmp_path)).prompts
    system, users = split_turns(prompts[0])
    assert system == [{"role": "system", "content": "你是助手0"}]
    assert users == ["对话0的第1问", "对话0的第2问", "对话0的第3问", "对话0的第4问"]
    assert followups_of(prompts, 3) == "dataset" and followups_of(prompts, 1) is None
    assert followups_of([item().prompt], 3) == "drawn"


def test_auto_follow_ups_replay_a_conversation_file_and_draw_for_a_prompt_corpus() -> None:
    """auto: real follow-ups when at least half the entries are multi-turn (the shared ShareGPT file: 63 %), drawn
    ones for a prompt corpus with a few dialogue entries (the bundled one: 46 of 339); SESSION_FOLLOWUPS decides
    when it names one."""
    bundled = load_dataset(PROJECT_ROOT / "loadgen" / "workloads" / "data" / "prompts_zh.jsonl").prompts
    assert 0 < multi_turn_share(bundled) < 0.5 and followups_of(bundled, 3) == "drawn"
    talk = Prompt("c", "t", [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                             {"role": "user", "content": "c"}])
    half = [talk, item().prompt]
    assert followups_of(half, 3) == "dataset" and followups_of(half, 3, "drawn") == "drawn"
    assert followups_of([item().prompt] * 3 + [talk], 3) == "drawn"
    assert followups_of([item().prompt], 3, "dataset") == "dataset"


def test_a_session_sends_each_real_turn_after_the_answers_so_far_and_ends_at_the_cap() -> None:
    """Turn k+1 = system, every earlier user turn and the model's own answers, then the next real user turn; the
    session ends after SESSION_TURNS turns, and each later turn carries the think time drawn at the answer."""
    talk = Prompt("c", "sharegpt", [{"role": "system", "content": "S"}, {"role": "user", "content": "u1"},
                                    {"role": "assistant", "content": "recorded"}, {"role": "user", "content": "u2"},
                                    {"role": "assistant", "content": "recorded"}, {"role": "user", "content": "u3"}])
    session = Session(7, talk, 2, "dataset", item, lambda: 1.5)
    one = session.next_item(item(max_tokens=9))
    assert one.session_id == "s7" and one.turn == 1 and one.max_tokens == 9 and one.think_time_s is None
    assert one.prompt.messages == [{"role": "system", "content": "S"}, {"role": "user", "content": "u1"}]
    session.answered(one, True, "model's A1")
    two = session.next_item()
    assert two.turn == 2 and two.think_time_s == 1.5
    assert [m["content"] for m in two.prompt.messages] == ["S", "u1", "model's A1", "u2"]
    session.answered(two, True, "A2")
    assert session.over and session.unsent == 0
    with pytest.raises(RuntimeError, match="over"):
        session.next_item()


def test_a_failed_turn_ends_its_session() -> None:
    """No answer to carry: the session is over, its remaining turns unsent."""
    session = Session(0, item().prompt, 4, "drawn", item, lambda: 0.0)
    first = session.next_item()
    session.answered(first, False, "")
    assert session.over and session.unsent == 3


def test_the_deck_deals_every_conversation_once_per_cycle_in_a_seeded_order() -> None:
    """Card n is the same for the same seed; the first len(prompts) cards are every conversation once."""
    prompts = [Prompt(str(i), "t", [{"role": "user", "content": str(i)}]) for i in range(6)]
    deck = ConversationDeck(prompts, 3)
    cycle = [deck.card(n).prompt_id for n in range(6)]
    assert sorted(cycle) == [str(i) for i in range(6)]
    assert [ConversationDeck(prompts, 3).card(n).prompt_id for n in range(6, 12)] == cycle


def test_closed_loop_users_play_numbered_conversations_and_think_between_turns(tmp_path: Path) -> None:
    """Two closed-loop users of process 1 of 2: their sessions are numbered 1, 3, ... (the slot's), each replays
    its dealt conversation, and the user pauses for the think time before a turn that goes on (not after the last)."""
    the_plan = plan(tmp_path, dataset=str(conversations_file(tmp_path)), session_turns=2, think_time=parse_think_time("1.5s"))
    state = RunState(the_plan, RequestLog(tmp_path / "log.jsonl"))
    state.begin(0, None, Slot(1, 2))
    a, b = object(), object()
    first_a = state.next_item(a, 1)
    first_b = state.next_item(b, 3)
    assert (first_a.session_id, first_b.session_id) == ("s1", "s3")
    deck = ConversationDeck(state.prompts, the_plan.seed)
    assert first_a.prompt.messages[-1]["content"] == split_turns(deck.card(1))[1][0]
    first_a.conversation.answered(first_a, True, "A")  # type: ignore[union-attr]
    assert state.think_after(a) == 1.5
    second_a = state.next_item(a, 5)
    assert second_a.turn == 2 and second_a.prompt.messages[-2:] == [
        {"role": "assistant", "content": "A"}, {"role": "user", "content": split_turns(deck.card(1))[1][1]}]
    second_a.conversation.answered(second_a, True, "B")  # type: ignore[union-attr]
    assert state.think_after(a) == 0.0  # its conversation ended: the next one starts at once
    assert state.next_item(a, 7).session_id == "s5"


def test_open_loop_arrivals_are_conversations_whose_turns_spend_the_request_budget(tmp_path: Path) -> None:
    """RATE arrivals are conversations; REQUESTS=7 of 3-turn conversations gives 3 + 3 + 1 turns, each turn sent
    after the previous answer, later turns scheduled at the answer plus the think time."""
    the_plan = plan(tmp_path, dataset=str(conversations_file(tmp_path)), session_turns=3, think_time=parse_think_time("0.25s"),
                    rate_req_per_sec=1000.0, mode="open_loop")  # fmt: skip
    state = RunState(the_plan, RequestLog(tmp_path / "log.jsonl"))
    state.begin(7, None)
    now = itertools.count(1000.0, 0.5)  # each clock reading 0.5 s later
    sent: list[tuple[str, int, float]] = []

    def one(work: WorkItem, at: float) -> None:
        sent.append((work.session_id or "", work.turn or 0, at))
        work.conversation.answered(work, True, f"answer {work.turn}")  # type: ignore[union-attr]

    dispatch_open_loop(state, one, clock=lambda: next(now))
    by_session: dict[str, list[tuple[int, float]]] = {}
    for sid, turn, at in sent:
        by_session.setdefault(sid, []).append((turn, at))
    assert sorted(len(turns) for turns in by_session.values()) == [1, 3, 3] and len(sent) == 7
    assert state.issued == 7


def test_converse_stops_at_the_window_end_and_returns_the_unsent_turns(tmp_path: Path) -> None:
    """A next turn that would leave after DURATION's end is not sent; the issued count drops by the turns unsent."""
    the_plan = plan(tmp_path, dataset=str(conversations_file(tmp_path)), session_turns=4, think_time=parse_think_time("10s"))
    state = RunState(the_plan, RequestLog(tmp_path / "log.jsonl"))
    session = state.open_session(0, state.item(0))
    state.issued = session.planned
    calls: list[int] = []

    def one(work: WorkItem, at: float) -> None:
        calls.append(work.turn or 0)
        session.answered(work, True, "a")

    sent = converse(state, session, item(), 100.0, one, deadline=105.0, clock=lambda: 100.0, sleep=lambda s: None)
    assert sent == 1 and calls == [1] and state.issued == 1


def test_real_mock_server_sees_turn_k_plus_1_only_after_turn_ks_answer_with_the_history(tmp_path: Path) -> None:
    """Over real HTTP: each later turn arrives at the mock after the previous answer ended plus the think time,
    and carries every earlier user turn with the model's streamed answers."""
    log = tmp_path / "mock.jsonl"
    the_plan = plan(tmp_path, dataset=str(conversations_file(tmp_path)), session_turns=3, think_time=parse_think_time("0.2s"),
                    max_tokens=5, output_len_mean=None, output_len_p95=None)  # fmt: skip
    cfg = MockConfig(tokens=5, ttft_ms=30.0, itl_ms=10.0, request_log=str(log), models=(the_plan.model,))
    rows = tmp_path / "rows.jsonl"
    with mock_in_thread(cfg) as url:
        state = RunState(the_plan.model_copy(update={"vllm_url": url}), RequestLog(tmp_path / "log.jsonl"))
        state.begin(0, rows)
        http = new_session()
        try:
            session = state.open_session(0, state.item(0))
            converse(state, session, state.item(1), time.time(),
                     lambda work, at: send(state, http, url, work, at))
        finally:
            http.close()
            state.close()
    received = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    records = [json.loads(line) for line in rows.read_text(encoding="utf-8").splitlines()]
    assert [r["turn"] for r in records] == [1, 2, 3] and all(r["ok"] for r in records)
    users = split_turns(ConversationDeck(state.prompts, the_plan.seed).card(0))[1]
    answer = TOKEN_TEXT * 5
    for k in (1, 2):
        ended = records[k - 1]["started_at"] + records[k - 1]["e2e_ms"] / 1000.0
        assert received[k]["at"] >= ended + 0.2 - 0.01, (k, received[k]["at"], ended)
        assert records[k]["think_time_s"] == 0.2
        talk = [m for m in received[k]["messages"] if m["role"] != "system"]
        assert talk == [m for t in range(k) for m in ({"role": "user", "content": users[t]},
                                                      {"role": "assistant", "content": answer})] + [
            {"role": "user", "content": users[k]}]  # fmt: skip


def test_think_time_text_and_draws() -> None:
    """THINK_TIME parses fixed, exponential and lognormal means (units of DURATION); draws have that mean."""
    assert parse_think_time("2s").distribution == "fixed" and parse_think_time("500ms").mean_s == 0.5
    assert parse_think_time("0").mean_s == 0.0 and think_sampler(parse_think_time("0"), 1)() == 0.0
    for text in ("exponential:2s", "lognormal:2s", "lognormal:2s:0.5"):
        draw = think_sampler(parse_think_time(text), 1)
        draws = [draw() for _ in range(20_000)]
        assert sum(draws) / len(draws) == pytest.approx(2.0, rel=0.06), text
    assert parse_think_time("lognormal:2s:0.5").text == "lognormal:2s:0.5"
    for bad in ("gauss:2s", "exponential:2s:1", "lognormal:2s:-1", "fast", "exponential:"):
        with pytest.raises(ValueError, match="THINK_TIME"):
            parse_think_time(bad)


def test_the_session_draws_of_one_conversation_never_shift_the_runs_request_sequence(tmp_path: Path) -> None:
    """A conversation's own follow-ups and lengths come from a generator of its own: workload item k is the same
    with and without conversations drawing from it."""
    prompts = [Prompt(str(i), "t", [{"role": "user", "content": str(i)}]) for i in range(9)]
    plain = WorkloadSampler(prompts, 5)
    busy = WorkloadSampler(prompts, 5)
    fork = busy.fork([5, 0])
    expected = [plain.next() for _ in range(5)]
    got = []
    for _ in range(5):
        fork.next()
        got.append(busy.next())
    assert got == expected
