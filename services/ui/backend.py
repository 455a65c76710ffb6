"""I/O with vLLM for one chat turn: counting prompt tokens (/tokenize) and streaming a chat completion."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from openai import AsyncOpenAI

from services.ui.chat import ChatMessage, clean_text

TOKENIZE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class TokenCount:
    """Prompt size after the chat template, in tokens, and the model's context length when reported."""

    count: int
    max_model_len: int | None


@dataclass
class StreamState:
    """Progress of one streamed answer, filled in while it streams (so a cancelled stream can still be logged).

    Times are ``time.perf_counter()`` seconds; ``error`` holds the exception that ended the stream, if any.
    """

    start_s: float | None = None
    first_token_s: float | None = None
    end_s: float | None = None
    text: str = ""
    request_id: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    chunks: int = 0
    error: BaseException | None = None


async def count_tokens(
    client: httpx.AsyncClient, url: str, model: str, messages: Sequence[ChatMessage]
) -> TokenCount | None:
    """Prompt tokens of ``messages`` from vLLM's ``POST /tokenize``; None when it cannot tell (old server, error).

    The request is then sent without a pre-check, and vLLM's own context error is mapped instead.
    """
    try:
        response = await client.post(
            f"{url}/tokenize", json={"model": model, "messages": list(messages)}, timeout=TOKENIZE_TIMEOUT_S
        )
        if response.status_code != 200:
            return None
        data = response.json()
    except (httpx.HTTPError, ValueError):
        return None
    count = data.get("count") if isinstance(data, dict) else None
    if not isinstance(count, int):
        return None
    max_len = data.get("max_model_len")
    return TokenCount(count=count, max_model_len=max_len if isinstance(max_len, int) else None)


def _usage(chunk: Any, state: StreamState) -> None:
    usage = getattr(chunk, "usage", None)
    if usage is not None:
        state.prompt_tokens = getattr(usage, "prompt_tokens", None)
        state.completion_tokens = getattr(usage, "completion_tokens", None)


async def stream_chat(
    client: AsyncOpenAI,
    kwargs: dict[str, Any],
    on_token: Callable[[str], Awaitable[None]],
    state: StreamState,
    clock: Callable[[], float] = time.perf_counter,
) -> StreamState:
    """Stream a chat completion into ``on_token`` (display-safe text pieces) and ``state``.

    Errors from the client end up in ``state.error`` (the function returns normally). ``asyncio.CancelledError``
    (the user pressed Stop) propagates after the HTTP response is closed, which makes vLLM abort the request.
    """
    state.start_s = clock()
    stream = None
    try:
        stream = await client.chat.completions.create(**kwargs)
        async for chunk in stream:
            state.chunks += 1
            state.request_id = state.request_id or getattr(chunk, "id", None)
            _usage(chunk, state)
            for choice in chunk.choices or []:
                piece = clean_text(choice.delta.content or "") if choice.delta else ""
                if piece:
                    if state.first_token_s is None:
                        state.first_token_s = clock()
                    state.text += piece
                    await on_token(piece)
                if choice.finish_reason:
                    state.finish_reason = choice.finish_reason
    except Exception as exc:  # every client failure becomes a value for the error mapping
        state.error = exc
    finally:
        state.end_s = clock()
        if stream is not None:
            await stream.close()
    return state
