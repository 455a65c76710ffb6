"""One chat turn of the UI against a fake vLLM (mock transports, no sockets): streaming, limits, errors, log line."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from openai import AsyncOpenAI

from core.settings import Settings
from ui import chat_errors as errors
from ui.chat import ChatParams
from ui.turn import ChatBackend, TurnResult

URL = "http://vllm.test:8100"
MODEL = "ernie-4.5-0.3b-pt"
PARAMS = ChatParams(temperature=0.0, top_p=1.0, max_tokens=128)


def chunk(content: str | None = None, finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    choices = [] if usage else [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]
    body: dict[str, Any] = {"id": "chatcmpl-abc", "object": "chat.completion.chunk", "created": 1, "model": MODEL}
    body["choices"] = choices
    if usage:
        body["usage"] = usage
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n".encode()


GOOD_STREAM = [
    chunk(""),
    chunk("混合"),
    chunk("专家\ufffd"),
    chunk("模型", finish="stop"),
    chunk(usage={"prompt_tokens": 19, "completion_tokens": 3, "total_tokens": 22}),
    b"data: [DONE]\n\n",
]


class FakeVllm:
    """Answers /health, /v1/models, /version and /tokenize (httpx) and chat completions (httpx2, for openai)."""

    def __init__(self, stream: list[bytes], *, prompt_tokens: int = 19, max_model_len: int = 4096) -> None:
        self.stream = stream
        self.prompt_tokens = prompt_tokens
        self.max_model_len = max_model_len
        self.up = True
        self.chat_requests: list[dict[str, Any]] = []
        self.tokenize_requests: list[dict[str, Any]] = []
        self.stream_closed = asyncio.Event()
        self.hang_after_first = False

    def http(self) -> httpx.AsyncClient:
        def handler(request: httpx.Request) -> httpx.Response:
            if not self.up:
                raise httpx.ConnectError("Connection refused", request=request)
            path = request.url.path
            if path == "/health":
                return httpx.Response(200)
            if path == "/v1/models":
                return httpx.Response(200, json={"data": [{"id": MODEL, "max_model_len": self.max_model_len}]})
            if path == "/version":
                return httpx.Response(200, json={"version": "0.32.0"})
            if path == "/tokenize":
                payload = json.loads(request.content)
                self.tokenize_requests.append(payload)
                count = self.prompt_tokens if len(self.tokenize_requests) == 1 else 7  # then: the message alone
                return httpx.Response(200, json={"count": count, "max_model_len": self.max_model_len})
            return httpx.Response(404)

        return httpx.AsyncClient(transport=httpx.MockTransport(handler))

    def llm(self) -> AsyncOpenAI:
        fake = self

        async def body() -> AsyncIterator[bytes]:
            try:
                for index, piece in enumerate(fake.stream):
                    yield piece
                    if fake.hang_after_first and index == 1:
                        await asyncio.sleep(3600)
            finally:
                fake.stream_closed.set()

        def handler(request: httpx2.Request) -> httpx2.Response:
            if not fake.up:
                raise httpx2.ConnectError("Connection refused", request=request)
            fake.chat_requests.append(json.loads(request.content))
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body())

        client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
        return AsyncOpenAI(base_url=f"{URL}/v1", api_key="EMPTY", max_retries=0, http_client=client)


def backend_for(fake: FakeVllm, tmp_path: Path, ui_max_tokens: int = 4096) -> ChatBackend:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, vllm_base_url=URL, logs_dir=tmp_path, request_timeout_s=30, ui_max_tokens=ui_max_tokens
    )
    return ChatBackend(settings, http=fake.http(), llm=fake.llm())


def log_lines(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text(encoding="utf-8").splitlines()]


def run(backend: ChatBackend, text: str = "请用三句话解释MoE架构的核心思想") -> tuple[TurnResult, list[str]]:
    pieces: list[str] = []

    async def on_token(piece: str) -> None:
        pieces.append(piece)

    async def go() -> TurnResult:
        return await backend.run_turn([], text, PARAMS, on_token)

    return asyncio.run(go()), pieces


def test_streams_clean_text_and_times_it(tmp_path: Path) -> None:
    """Tokens stream in order without U+FFFD; the result has timing and usage counts."""
    result, pieces = run(backend_for(FakeVllm(GOOD_STREAM), tmp_path))
    assert pieces == ["混合", "专家", "模型"]
    assert result.answer == "混合专家模型" and result.error is None
    assert result.timing is not None and result.timing.ttft_ms is not None
    assert (result.timing.prompt_tokens, result.timing.completion_tokens) == (19, 3)
    assert result.request_id == "chatcmpl-abc"


def test_every_turn_writes_one_log_line(tmp_path: Path) -> None:
    """A successful turn appends one ``source=ui`` line with ids, tokens and timings to requests.jsonl."""
    run(backend_for(FakeVllm(GOOD_STREAM), tmp_path))
    (line,) = log_lines(tmp_path)
    assert line["source"] == "ui" and line["status"] == "ok" and line["error"] is None
    assert (line["request_id"], line["model"]) == ("chatcmpl-abc", MODEL)
    assert (line["prompt_tokens"], line["completion_tokens"]) == (19, 3)
    assert line["ttft_ms"] is not None and line["total_ms"] >= line["ttft_ms"]


def test_request_uses_the_served_model_and_streams_usage(tmp_path: Path) -> None:
    """The request goes to the model vLLM lists now, streaming with usage."""
    fake = FakeVllm(GOOD_STREAM)
    run(backend_for(fake, tmp_path))
    (sent,) = fake.chat_requests
    assert sent["model"] == MODEL and sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


def test_too_large_max_tokens_is_clamped_and_announced(tmp_path: Path) -> None:
    """max_tokens above what fits is lowered before sending, and the answer says so."""
    fake = FakeVllm(GOOD_STREAM, prompt_tokens=4000, max_model_len=4096)
    result, _ = run(backend_for(fake, tmp_path))
    assert fake.chat_requests[0]["max_tokens"] == 96
    assert result.notice is not None and "128" in result.notice and "96" in result.notice


def test_whole_context_as_max_tokens_is_lowered_to_the_ui_limit_before_sending(tmp_path: Path) -> None:
    """max_tokens = the whole context (131,072) goes out as UI_MAX_TOKENS, and the notice arrives before the request
    is sent (so the reader sees it at once, not under an answer that ends hours later)."""
    fake = FakeVllm(GOOD_STREAM, prompt_tokens=20, max_model_len=131_072)
    backend = backend_for(fake, tmp_path, ui_max_tokens=4096)
    notices: list[tuple[str, int]] = []

    async def on_token(piece: str) -> None:
        pass

    async def on_notice(text: str) -> None:
        notices.append((text, len(fake.chat_requests)))

    params = ChatParams(temperature=0.0, top_p=1.0, max_tokens=131_072)
    result = asyncio.run(backend.run_turn([], "hi", params, on_token, on_notice=on_notice))
    assert fake.chat_requests[0]["max_tokens"] == 4096
    ((notice, sent_before),) = notices
    assert sent_before == 0 and "131,072" in notice and "4,096" in notice and "UI_MAX_TOKENS" in notice
    assert result.notice == notice


def test_prompt_over_the_context_is_not_sent(tmp_path: Path) -> None:
    """A message that alone fills the context (no history to trim) is refused before sending, with the limit and
    the size, and logged."""
    fake = FakeVllm(GOOD_STREAM, prompt_tokens=5000, max_model_len=4096)
    result, pieces = run(backend_for(fake, tmp_path))
    assert fake.chat_requests == [] and pieces == []
    assert result.error is not None and result.error.kind == "context_too_long"
    assert "5,000 tokens" in result.error.message and "4,096 tokens" in result.error.message
    assert "Your message is 5,000 tokens" in result.error.message and "Shorten the message" in result.error.message
    line = log_lines(tmp_path)[0]
    assert line["status"] == "error" and line["prompt_tokens"] == 5000


def test_backend_down_is_reported_and_logged(tmp_path: Path) -> None:
    """With vLLM unreachable the turn fails fast with the down message and a logged error line."""
    fake = FakeVllm(GOOD_STREAM)
    fake.up = False
    result, _ = run(backend_for(fake, tmp_path))
    assert result.error is not None and result.error.kind == "backend_down"
    assert result.status.state == "Down"
    line = log_lines(tmp_path)[0]
    assert line["status"] == "error" and "backend down" in line["error"]


def test_stream_without_finish_is_cut_off(tmp_path: Path) -> None:
    """A stream that ends without a finish reason keeps the partial text and says it was cut off."""
    result, pieces = run(backend_for(FakeVllm(GOOD_STREAM[:3]), tmp_path))
    assert pieces == ["混合", "专家"]
    assert result.error is not None and result.error.kind == "stream_cut"
    assert result.answer == "混合专家" and result.timing is None
    assert log_lines(tmp_path)[0]["error"] == "stream cut off"


def test_stop_cancels_and_closes_the_server_stream(tmp_path: Path) -> None:
    """Cancelling the turn (Stop) closes the HTTP stream (vLLM aborts on disconnect) and logs ``cancelled``."""
    fake = FakeVllm(GOOD_STREAM)
    fake.hang_after_first = True
    backend = backend_for(fake, tmp_path)
    first_token = asyncio.Event()

    async def on_token(piece: str) -> None:
        first_token.set()

    async def go() -> None:
        task = asyncio.create_task(backend.run_turn([], "q", PARAMS, on_token))
        await asyncio.wait_for(first_token.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(fake.stream_closed.wait(), 5)

    asyncio.run(go())
    line = log_lines(tmp_path)[0]
    assert line["status"] == "cancelled" and line["error"] == "cancelled" and line["ttft_ms"] is not None


def test_disconnect_cancels_and_logs_why(tmp_path: Path) -> None:
    """A turn cancelled because the session disconnected closes the server stream and logs ``cancelled`` with
    that cause (the cancel message carries the reason)."""
    fake = FakeVllm(GOOD_STREAM)
    fake.hang_after_first = True
    backend = backend_for(fake, tmp_path)
    first_token = asyncio.Event()

    async def on_token(piece: str) -> None:
        first_token.set()

    async def go() -> None:
        task = asyncio.create_task(backend.run_turn([], "q", PARAMS, on_token))
        await asyncio.wait_for(first_token.wait(), 5)
        task.cancel(errors.DISCONNECTED)
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(fake.stream_closed.wait(), 5)

    asyncio.run(go())
    (line,) = log_lines(tmp_path)
    assert line["status"] == "cancelled" and line["error"] == errors.cancelled(errors.DISCONNECTED).cause


def test_fast_stream_lets_other_tasks_run_between_chunks(tmp_path: Path) -> None:
    """Chunks that are all ready at once (a fast model) still let the event loop run between them, so the tokens
    reach the browser as they come and a Stop or a disconnect is handled mid-answer, not after the end."""
    many = [chunk(""), *(chunk("字") for _ in range(50)), chunk("", finish="length"), b"data: [DONE]\n\n"]
    backend = backend_for(FakeVllm(many), tmp_path)
    ticks = 0
    seen: list[int] = []

    async def on_token(piece: str) -> None:
        seen.append(ticks)

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async def go() -> None:
        other = asyncio.create_task(ticker())
        await backend.run_turn([], "q", PARAMS, on_token)
        other.cancel()

    asyncio.run(go())
    assert len(seen) == 50 and all(b > a for a, b in itertools.pairwise(seen)), seen
