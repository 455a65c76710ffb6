"""Reasoning streams: a recorded vLLM 0.32 stream and the mock's reasoning mode give both first-token times and the
reasoning/answer token split; a stream without reasoning gives the row it always gave."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from core.records import OMITTED_WHEN_UNSET, RequestRecord
from loadgen.request.client import chat_payload, new_session, stream_chat
from loadgen.selftest.mock_answers import MockConfig
from tests.fakes import ScriptedTransport
from tests.unit.loadgen.mock_in_loop import mock_in_thread

VLLM_STREAM = Path(__file__).parents[2] / "fixtures" / "streams" / "vllm_0.32_reasoning.sse"


def events() -> list[bytes]:
    """The recorded stream's events (each ``data: ...\\n\\n``)."""
    return [e + b"\n\n" for e in VLLM_STREAM.read_bytes().split(b"\n\n") if e.strip()]


def run(blocks: list[bytes]) -> RequestRecord:
    ticks = itertools.count(0.0, 0.01)  # every clock reading 10 ms after the last: send at 0, one event per reading
    payload = chat_payload("r1-tiny", [{"role": "user", "content": "MoE?"}], max_tokens=64, temperature=0.0)
    return stream_chat(ScriptedTransport(blocks), "http://vllm", payload, timeout_s=5, clock=lambda: next(ticks))


def test_recorded_vllm_reasoning_stream_gives_both_first_token_times_and_usage_split() -> None:
    """vLLM 0.32's stream (``reasoning`` deltas from its DeepSeek-R1 parser, then content): TTFT is the first
    reasoning token, the answer's first token comes 7 reasoning chunks later, and the split is usage's."""
    record = run(events())
    assert record.ok and record.end_reason == "done"
    assert record.ttft_ms == record.reasoning_ttft_ms
    assert record.answer_ttft_ms == pytest.approx(record.ttft_ms + 7 * 10.0)  # type: ignore[operator]
    assert (record.reasoning_tokens, record.answer_tokens, record.reasoning_tokens_source) == (7, 8, "usage")
    assert record.output_tokens == 15 and record.cached_tokens == 16 and record.prompt_tokens == 21


def test_without_usage_the_split_is_counted_by_chunks_and_marked() -> None:
    """The same stream without its usage chunk: 7 reasoning and 6 answer token chunks, marked ``chunks``."""
    record = run([e for e in events() if b'"usage"' not in e])
    assert (record.reasoning_tokens, record.answer_tokens, record.reasoning_tokens_source) == (7, 6, "chunks")
    assert record.cached_tokens is None


def test_reasoning_content_field_of_older_servers_is_read_the_same() -> None:
    """``reasoning_content`` (older vLLM, DeepSeek's API) times like vLLM 0.32's ``reasoning``."""
    renamed = [e.replace(b'"reasoning":', b'"reasoning_content":') for e in events()]
    assert run(renamed).model_dump(exclude={"request_id", "started_at"}) == run(events()).model_dump(
        exclude={"request_id", "started_at"})


def test_a_stream_that_never_reaches_its_answer_has_no_answer_ttft() -> None:
    """max_tokens spent on reasoning: the row is ok (it streamed tokens), its answer TTFT None."""
    thinking = [e for e in events() if b'"content":"' not in e or b'"role"' in e]
    record = run(thinking)
    assert record.ok and record.reasoning_ttft_ms is not None and record.answer_ttft_ms is None


def test_a_stream_without_reasoning_gives_the_row_it_always_gave() -> None:
    """No reasoning delta and no cached-token count: none of the new fields is in the row's JSON."""
    plain = [e for e in events() if b'"reasoning"' not in e and b'"usage"' not in e]
    row = json.loads(run(plain).model_dump_json())
    assert set(row) == set(RequestRecord.model_fields) - OMITTED_WHEN_UNSET
    assert row["ttft_ms"] is not None


def test_mock_reasoning_mode_streams_reasoning_then_answer() -> None:
    """The mock with ``--reasoning 3`` (real HTTP): three reasoning tokens first, usage counts them, and the
    answer's first token is the fourth; ``reasoning_content`` mode reads the same."""
    for field in ("reasoning", "reasoning_content"):
        cfg = MockConfig(tokens=6, ttft_ms=20.0, itl_ms=10.0, reasoning_tokens=3, reasoning_field=field)
        with mock_in_thread(cfg) as url:
            session = new_session()
            try:
                record = stream_chat(session, url, chat_payload("mock-model", [{"role": "user", "content": "hi"}],
                                                                6, 0.0), timeout_s=5)  # fmt: skip
            finally:
                session.close()
        assert record.ok and record.ttft_ms == record.reasoning_ttft_ms
        # the mock sends the answer's first token 3 ITLs after the first reasoning token, itself ttft_ms after the
        # request: on the server's schedule, not after the client saw the first token (a busy client sees it late)
        assert record.answer_ttft_ms is not None and record.ttft_ms is not None
        assert record.answer_ttft_ms >= cfg.ttft_ms + 3 * cfg.itl_ms - 1.0 and record.answer_ttft_ms > record.ttft_ms
        assert (record.reasoning_tokens, record.answer_tokens, record.reasoning_tokens_source) == (3, 3, "usage")
