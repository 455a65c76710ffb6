"""Long chats and reasoning models in the chat UI: older turns trimmed with a notice to fit the context (never a 400
shown to the user), and thinking time apart from answer time."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import httpx2
from openai import AsyncOpenAI

from tests.unit.ui.test_ui_turn import GOOD_STREAM, MODEL, URL, FakeVllm, backend_for, chunk
from ui.answer_view import answer_markdown
from ui.chat import ChatMessage, ChatParams, drop_oldest_turns, turn_count
from ui.timing import compute_timing, format_timing
from ui.turn import TurnResult

PARAMS = ChatParams(temperature=0.0, top_p=1.0, max_tokens=100)


def history(turns: int) -> list[ChatMessage]:
    """``turns`` earlier turns, each a 100-character question and a 100-character answer."""
    out: list[ChatMessage] = []
    for t in range(turns):
        out += [{"role": "user", "content": f"q{t}" + "问" * 98}, {"role": "assistant", "content": f"a{t}" + "答" * 98}]
    return out


class CountingVllm(FakeVllm):
    """/tokenize counts one token per character of every message; without ``tokenize`` it answers 404 and the chat
    endpoint refuses a prompt over the context with vLLM 0.32's HTTP 400 instead."""

    def __init__(self, stream: list[bytes], max_model_len: int, tokenize: bool = True) -> None:
        super().__init__(stream, max_model_len=max_model_len)
        self.tokenize = tokenize

    @staticmethod
    def size(messages: list[dict[str, Any]]) -> int:
        return sum(len(m["content"]) for m in messages)

    def http(self) -> httpx.AsyncClient:
        base = super().http()._transport

        def handler(request: httpx.Request) -> httpx.Response:
            if request.url.path == "/tokenize":
                if not self.tokenize:
                    return httpx.Response(404)
                payload = json.loads(request.content)
                self.tokenize_requests.append(payload)
                return httpx.Response(200, json={"count": self.size(payload["messages"]),
                                                 "max_model_len": self.max_model_len})
            return base.handle_request(request)  # type: ignore[attr-defined]

        return httpx.AsyncClient(transport=httpx.MockTransport(handler))

    def llm(self) -> AsyncOpenAI:
        plain = super().llm()
        fake = self

        def handler(request: httpx2.Request) -> httpx2.Response:
            body = json.loads(request.content)
            size = fake.size(body["messages"])
            if size + body["max_tokens"] > fake.max_model_len:
                fake.chat_requests.append(body)
                message = (f"This model's maximum context length is {fake.max_model_len} tokens. However, your "
                           f"request has {size + body['max_tokens']} input tokens. Please reduce the length.")
                return httpx2.Response(400, json={"object": "error", "message": message, "type": "BadRequestError",
                                                  "param": None, "code": 400})
            return plain._client._transport.handle_async_request(request)  # type: ignore[return-value]

        client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
        return AsyncOpenAI(base_url=f"{URL}/v1", api_key="EMPTY", max_retries=0, http_client=client)


def turn(fake: FakeVllm, tmp_path: Path, past: list[ChatMessage], text: str = "新问题") -> tuple[TurnResult, list[str]]:
    notices: list[str] = []

    async def on_token(piece: str) -> None:
        pass

    async def on_notice(notice: str) -> None:
        notices.append(notice)

    backend = backend_for(fake, tmp_path)
    return asyncio.run(backend.run_turn(past, text, PARAMS, on_token, on_notice=on_notice)), notices


def test_oldest_turns_are_dropped_whole() -> None:
    """A turn is a user message and its answer; dropping two leaves the rest in order; dropping all leaves none."""
    past = history(3)
    assert drop_oldest_turns(past, 2) == past[4:] and turn_count(past) == 3 and drop_oldest_turns(past, 5) == []


def test_a_chat_longer_than_the_context_drops_its_oldest_turns_with_a_notice(tmp_path: Path) -> None:
    """10 earlier turns (2,000 tokens) with a 1,000-token context: the oldest turns are left out until the prompt
    leaves the answer its 100 tokens, the request goes out (no error), and the notice says how many were dropped."""
    fake = CountingVllm(GOOD_STREAM, max_model_len=1000)
    result, notices = turn(fake, tmp_path, history(10))
    assert result.error is None and result.answer == "混合专家模型"
    (sent,) = fake.chat_requests
    assert CountingVllm.size(sent["messages"]) + 100 <= 1000 and sent["messages"][-1]["content"] == "新问题"
    kept = turn_count(result.history)
    assert result.trimmed_turns == 10 - kept and kept == 4  # 4 turns (800) + the message (3) leave 197 tokens
    assert sent["messages"][:-1] == result.history == history(10)[-8:]
    assert notices and "6 earlier turns were left out" in notices[0] and "1,000 tokens" in notices[0]
    assert "6 earlier turns were left out" in (result.notice or "")
    assert "left out" in answer_markdown(result.answer, result.timing, result.notice, result.error)


def test_a_chat_that_fits_keeps_every_turn_and_says_nothing(tmp_path: Path) -> None:
    """Two short earlier turns in a 4,096-token context: everything is sent, no notice."""
    fake = CountingVllm(GOOD_STREAM, max_model_len=4096)
    result, notices = turn(fake, tmp_path, history(2))
    assert result.trimmed_turns == 0 and result.history == history(2) and notices == [] and result.notice is None
    assert fake.chat_requests[0]["messages"][:-1] == history(2)


def test_without_tokenize_a_refused_length_is_sent_again_with_fewer_turns_never_shown_as_a_400(
        tmp_path: Path) -> None:
    """A server without /tokenize refuses the long chat with HTTP 400; the UI halves the older turns and sends
    again until it fits: the user gets the answer and a notice, never the 400."""
    fake = CountingVllm(GOOD_STREAM, max_model_len=1000, tokenize=False)
    result, notices = turn(fake, tmp_path, history(10))
    assert result.error is None and result.answer == "混合专家模型"
    assert [turn_count(r["messages"]) - 1 for r in fake.chat_requests] == [10, 5, 3]  # 10 → 5 → 3 turns: fits
    assert turn_count(result.history) == 3 and result.trimmed_turns == 7
    assert any("7 earlier turns were left out" in n for n in notices)


def reasoning_chunk(text: str) -> bytes:
    body = {"id": "chatcmpl-r", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "delta": {"reasoning": text}, "finish_reason": None}]}
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n".encode()


def test_a_reasoning_models_answer_shows_thinking_apart_from_the_answer(tmp_path: Path) -> None:
    """Reasoning deltas before the content: the answer shown is the content alone, and the timing line splits
    Think (first thinking token → first answer token) from Answer (→ the end); a plain answer keeps Gen."""
    stream = [chunk(""), reasoning_chunk("先想"), reasoning_chunk("一想"), *GOOD_STREAM[1:4],
              chunk(usage={"prompt_tokens": 19, "completion_tokens": 5, "total_tokens": 24,
                           "completion_tokens_details": {"reasoning_tokens": 2}}),  # type: ignore[dict-item]
              b"data: [DONE]\n\n"]  # fmt: skip
    result, _ = turn(FakeVllm(stream), tmp_path, [])
    assert result.answer == "混合专家模型" and result.timing is not None
    assert result.timing.think_ms is not None and result.timing.answer_ms is not None
    line = format_timing(result.timing)
    assert "Think:" in line and "Answer:" in line and "Gen:" not in line and "(2\u00a0thinking)" in line
    rendered = answer_markdown(result.answer, result.timing, None, None)
    assert "Think = first thinking token" in rendered
    plain = format_timing(compute_timing(0.0, 0.1, 1.0, 19, 3))
    assert "Gen:" in plain and "Think" not in plain


def test_thinking_that_never_reaches_an_answer_is_all_think_time() -> None:
    """max_tokens spent thinking: Think runs to the end, Answer is n/a."""
    timing = compute_timing(0.0, 0.1, 2.1, 19, 64, first_reasoning_s=0.1, reasoning_tokens=64)
    assert timing.think_ms == 2000.0 and timing.answer_ms is None
    assert "Answer:\u00a0n/a" in format_timing(timing)


def test_a_turn_that_fails_before_sending_keeps_the_whole_history(tmp_path: Path) -> None:
    """vLLM down: nothing was trimmed, and the chat keeps every earlier turn for the next message."""
    fake = CountingVllm(GOOD_STREAM, max_model_len=1000)
    fake.up = False
    result, _ = turn(fake, tmp_path, history(3))
    assert result.error is not None and result.history == history(3) and result.trimmed_turns == 0
