"""Conversations against the stack's vLLM: 10 sessions × 4 real turns (a ShareGPT-style file), each turn sent after
the previous answer with the whole history, give per-turn figures and a prefix-cache hit rate above that of the same
user messages sent as single turns."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.settings import PROJECT_ROOT
from loadgen.request.client import chat_payload, new_session, stream_chat
from tests.integration.conftest import Stack
from tests.integration.test_benchmark_modes import report_of

pytestmark = pytest.mark.integration

SESSIONS, TURNS = 10, 4  # the hit rates are per token: 10 sessions show them as well as 20 (lane stack's time)
CORPUS = PROJECT_ROOT / "loadgen" / "workloads" / "data" / "prompts_zh.jsonl"


def user_turns() -> list[list[str]]:
    """10 conversations of 4 user turns, each turn 160 characters of the bundled corpus (a few hundred tokens of the
    tiny model) behind its own tag (so no two conversations share more than the chat template)."""
    entries = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    corpus = [e.get("prompt") or e["messages"][-1]["content"] for e in entries]
    talks, k = [], 0
    for c in range(SESSIONS):
        turns = []
        for t in range(TURNS):
            text = "".join(corpus[(k + i) % len(corpus)] for i in range(8))[:160]  # 4 turns stay far below 4,096
            turns.append(f"会话{c}第{t + 1}轮：{text}")
            k += 8
        talks.append(turns)
    return talks


def sharegpt_file(folder: Path, talks: list[list[str]]) -> Path:
    """The conversations as ShareGPT JSONL, with recorded answers between the turns (never sent)."""
    path = folder / "conversations.jsonl"
    lines = []
    for turns in talks:
        talk: list[dict[str, str]] = []
        for text in turns:
            talk += [{"from": "human", "value": text}, {"from": "gpt", "value": "录好的回答"}]
        lines.append(json.dumps({"conversations": talk}, ensure_ascii=False))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def prefix_counters(stack: Stack) -> tuple[float, float]:
    """vLLM's prefix-cache (hits, queries) counters, tokens."""
    text = httpx.get(f"{stack.vllm_url}/metrics", timeout=10).text
    found = [re.search(rf"^vllm:prefix_cache_{name}_total\{{[^}}]*\}} (\S+)$", text, re.MULTILINE)
             for name in ("hits", "queries")]  # fmt: skip
    assert all(found), "vLLM exposes no prefix-cache counters"
    return float(found[0].group(1)), float(found[1].group(1))  # type: ignore[union-attr]


def rows_of(stack: Stack, report: dict[str, Any]) -> list[dict[str, Any]]:
    path = stack.reports_dir / f"{report['report_id']}.requests.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_conversations_replay_real_turns_and_hit_the_prefix_cache(stack: Stack, tmp_path: Path) -> None:
    """Open loop at 1 conversation/s, REQUESTS=40: 10 sessions of 4 turns, each turn after the previous answer
    plus the think time with prompts that hold the history; per-turn TTFT/ITL/E2E/prompt and cached tokens in the
    report and the terminal; the run's prefix-cache hit rate (vLLM's counters) is well above the same 40 user
    messages sent one by one as single turns."""
    talks = user_turns()
    dataset = sharegpt_file(tmp_path, talks)
    stack.wait_until_idle()
    run = stack.make("benchmark", DATASET=str(dataset), SESSION_TURNS=str(TURNS), RATE="1",
                     REQUESTS=str(SESSIONS * TURNS), WARMUP="0", MAX_TOKENS="16", IGNORE_EOS="1",
                     THINK_TIME="0.2s", timeout_s=900)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = report_of(run.stdout)
    config, metrics = report["config"], report["metrics"]
    assert (config["session_turns"], config["session_followups"]) == (TURNS, "dataset")
    assert config["think_time"]["mean_s"] == 0.2
    rows = rows_of(stack, report)
    assert len(rows) == SESSIONS * TURNS and all(r["ok"] for r in rows), [r.get("error") for r in rows]
    sessions: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        sessions.setdefault(row["session_id"], []).append(row)
    assert len(sessions) == SESSIONS
    for turns in sessions.values():
        turns.sort(key=lambda r: r["turn"])
        assert [r["turn"] for r in turns] == list(range(1, TURNS + 1))
        for before, after in itertools.pairwise(turns):
            ended = before["started_at"] + before["e2e_ms"] / 1000.0
            assert after["started_at"] >= ended + 0.2 - 0.01, (before, after)  # after the answer and the think time
            assert after["prompt_tokens"] >= before["prompt_tokens"] + before["output_tokens"], (before, after)
    per_turn = metrics["turns"]
    assert [t["turn"] for t in per_turn] == list(range(1, TURNS + 1))
    for t in per_turn:
        assert t["requests"] == SESSIONS and t["ttft"]["p50_ms"] and t["e2e"]["p50_ms"] and t["itl"]["p50_ms"]
    prompts = [t["prompt_tokens_mean"] for t in per_turn]
    assert prompts == sorted(prompts) and prompts[0] < prompts[-1]
    assert per_turn[-1]["cache_hit_percent"] is not None and per_turn[-1]["cache_hit_percent"] > 50.0, per_turn
    assert metrics["sessions"]["sessions"] == SESSIONS and metrics["sessions"]["turns_mean"] == TURNS
    assert f"[RESULT] Sessions: {SESSIONS} sessions, {TURNS:.1f} turns each" in run.stdout
    assert f"[TURN] turn {TURNS}: {SESSIONS} requests" in run.stdout
    conversation_rate = report["server"]["prefix_cache_hit_rate_percent"]

    stack.wait_until_idle()
    hits_before, queries_before = prefix_counters(stack)
    http = new_session(headers=stack.vllm_headers)
    try:
        for text in (text for turns in talks for text in turns):  # the same user messages, each on its own
            payload = chat_payload(config["model"], [{"role": "user", "content": text}], 16, 0.0,
                                   ignore_eos=True, min_tokens=16)  # fmt: skip
            single = stream_chat(http, stack.vllm_url, payload, timeout_s=120)
            assert single.ok, single.error
    finally:
        http.close()
    hits_after, queries_after = prefix_counters(stack)
    single_rate = 100.0 * (hits_after - hits_before) / (queries_after - queries_before)
    print(f"\n[conversations] prefix-cache hit rate: {conversation_rate:.1f}% as conversations, "
          f"{single_rate:.1f}% as single turns; per turn {[t['cache_hit_percent'] for t in per_turn]}")
    assert conversation_rate > single_rate + 15.0, (conversation_rate, single_rate)
