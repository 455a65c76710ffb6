"""I/O with vLLM for one chat turn: counting prompt tokens (/tokenize) and streaming a chat completion."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from openai import AsyncOpenAI

from core.streamtiming import StreamTimer, interpret_chunk
from ui.chat import ChatMessage, clean_text

TOKENIZE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class TokenCount:
    """Prompt size after the chat template, in tokens, and the model's context length when reported."""

    count: int
    max_model_len: int | None


@dataclass
class StreamState:
    """Progress of one streamed answer, filled in while it streams (so a cancelled stream can still be logged).

    ``timer``: the stream timing shared with the benchmark (:class:`core.streamtiming.StreamTimer`: TTFT, end,
    finish reason, usage); ``text``: the answer shown; ``error``: the exception that ended the stream; ``invalid``:
    why a chunk was refused.
    """

    timer: StreamTimer = field(default_factory=StreamTimer)
    text: str = ""
    request_id: str | None = None
    error: BaseException | None = None
    invalid: str | None = None


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


async def stream_chat(
    client: AsyncOpenAI,
    kwargs: dict[str, Any],
    on_token: Callable[[str], Awaitable[None]],
    state: StreamState,
) -> StreamState:
    """Stream a chat completion into ``on_token`` (display-safe text pieces) and ``state``.

    Errors from the client end up in ``state.error`` (the function returns normally). ``asyncio.CancelledError``
    (the user pressed Stop, or the session disconnected) propagates after the HTTP response is closed, which makes
    vLLM abort the request. The loop yields to the event loop after every chunk, so a fast model cannot hold it.
    """
    timer = state.timer
    timer.start()
    stream = None
    try:
        stream = await client.chat.completions.create(**kwargs)
        async for chunk in stream:
            state.request_id = state.request_id or getattr(chunk, "id", None)
            facts = interpret_chunk(chunk.to_dict(warnings=False))
            if facts.invalid or facts.error:
                state.invalid = facts.invalid or f"server error in stream: {facts.error}"
                break
            timer.feed(facts)
            piece = clean_text(facts.content)
            if piece:
                state.text += piece
                await on_token(piece)
            # Let the event loop run: when chunks arrive faster than they are handled, reading the next one never
            # suspends, so without this the socket writes (the tokens shown) and Stop / disconnect handlers would
            # wait for the end of the answer.
            await asyncio.sleep(0)
        else:
            timer.closed()  # the SDK ends the iteration at [DONE] or a clean close: complete if a finish_reason came
    except Exception as exc:  # every client failure becomes a value for the error mapping
        state.error = exc
    finally:
        timer.end()
        if stream is not None:
            await stream.close()
    return state
