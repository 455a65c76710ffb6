"""Failures of a chat request in the user's words (what happened, the sizes involved, what to do), plus a short
cause for ``logs/requests.jsonl``. Pure: exceptions and sizes in, :class:`UiError` out."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import httpx
import openai

from ui.chat import ContextTooLong, TokenBudget
from ui.status import BackendStatus

ErrorKind = Literal["backend_down", "backend_loading", "context_too_long", "max_tokens_too_large", "server_error",
                    "stream_cut", "timeout", "model_gone", "rejected", "cancelled", "unknown"]  # fmt: skip

_CONTEXT_LIMIT_RE = re.compile(r"maximum context length is (\d+)")
_PROMPT_SIZE_RE = re.compile(r"(\d+) (?:input tokens|tokens in the messages|in the messages)")
_MAX_TOKENS_RE = re.compile(r"max_tokens=(\d+) cannot be greater than max_model_len=(\d+)")


@dataclass(frozen=True)
class UiError:
    """A failed (or stopped) request: ``message`` is Markdown for the chat, ``cause`` one line for the log."""

    kind: ErrorKind
    message: str
    cause: str


def backend_unavailable(status: BackendStatus | None, url: str) -> UiError:
    """vLLM cannot take requests: still loading (wait) or down (start it)."""
    if status is not None and status.state == "Loading":
        return UiError("backend_loading", "**The model server is still loading.** vLLM is starting up (usually 1-3 "
                       "minutes). Wait until the header says `Status: Ready`, then send your message again.",
                       "backend loading")  # fmt: skip
    return UiError("backend_down", f"**The model server is down:** vLLM is not reachable at {url}.\n\nStart it with "
                   "`make up` (or `python -m engine.launcher`), wait for `Status: Ready`, then send your message "
                   "again.", f"backend down: {url} not reachable")  # fmt: skip


def context_too_long(problem: ContextTooLong, model: str) -> UiError:
    """The prompt does not fit: report the limit and the size, and whether the history is the problem."""
    size = f"{problem.prompt_tokens:,} tokens"
    limit = f"{problem.max_model_len:,} tokens"
    if problem.message_alone_too_long or problem.message_tokens is None:
        what = f"Your message is {size}" if problem.message_alone_too_long else f"The prompt is {size}"
        advice = "Shorten the message."
    else:
        what = (
            f"The conversation so far plus your message is {size} "
            f"(your message alone: {problem.message_tokens:,} tokens)"
        )
        advice = "Start a **New Chat** to drop the history, or shorten the message."
    cause = f"context too long: {problem.prompt_tokens} tokens > max_model_len {problem.max_model_len}"
    message = f"**Too long for the model:** {what}, but `{model}` reads at most {limit} (its context). {advice}"
    return UiError("context_too_long", message, cause)


def clamp_notice(budget: TokenBudget) -> str | None:
    """A sentence when ``max_tokens`` was lowered (to the UI's limit or to fit the context), else None."""
    if budget.limited_by is None:
        return None
    lowered = f"max_tokens lowered from {budget.requested:,} to {budget.max_tokens:,}"
    if budget.limited_by == "ui":
        return (
            f"{lowered}: the chat UI asks for at most {budget.ui_limit:,} answer tokens (UI_MAX_TOKENS), so one "
            "answer cannot hold the model server for hours."
        )
    assert budget.max_model_len is not None and budget.prompt_tokens is not None  # known when the context limits
    return (
        f"{lowered} so the answer fits: the context is {budget.max_model_len:,} tokens and the prompt uses "
        f"{budget.prompt_tokens:,}."
    )


def trim_notice(turns: int, kept: int, max_model_len: int | None) -> str:
    """The sentence shown when older turns were left out so the conversation fits the context."""
    context = f" ({max_model_len:,} tokens)" if max_model_len else ""
    earlier = "1 earlier turn was" if turns == 1 else f"{turns} earlier turns were"
    return (
        f"{earlier} left out so the conversation fits the model's context{context}: the model sees the last "
        f"{kept} turn(s) and your message. Start a **New Chat** to begin afresh."
    )


ARRIVED = " The part above is all that arrived."


def stream_cut(partial: bool) -> UiError:
    """The stream ended without a finish reason (connection closed mid-answer)."""
    return UiError("stream_cut", f"**The answer was cut off:** the connection to the model server closed mid-stream."
                   f"{ARRIVED if partial else ''} Check that vLLM is still running (`logs/vllm.log`) and send the "
                   "message again.", "stream cut off")  # fmt: skip


def malformed_stream(problem: str, partial: bool) -> UiError:
    """The server sent a chunk that is not an OpenAI chat-completion chunk (or an error object mid-stream)."""
    shown = ARRIVED if partial else ""
    return UiError("server_error", f"**The model server sent a malformed answer** ({problem}).{shown} Send the "
                   "message again.", f"invalid stream: {problem[:200]}")  # fmt: skip


CancelReason = Literal["stopped", "disconnected"]
STOPPED: CancelReason = "stopped"
DISCONNECTED: CancelReason = "disconnected"


def cancelled(reason: str | None = STOPPED) -> UiError:
    """The request was cancelled on the server too: the user pressed Stop, or the chat session ended (tab closed,
    network gone, session timeout; ``reason`` ``disconnected``) and nobody is left to read the answer."""
    if reason == DISCONNECTED:
        return UiError("cancelled", "**Stopped:** the browser disconnected, so the request was cancelled on the "
                       "server.", "cancelled: the chat session disconnected")  # fmt: skip
    return UiError("cancelled", "**Stopped.** The request was cancelled on the server.", "cancelled")


def _api_message(exc: openai.APIError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return str(exc.message)


def _bad_request(text: str, model: str) -> UiError:
    if match := _MAX_TOKENS_RE.search(text):
        asked, limit = int(match.group(1)), int(match.group(2))
        return UiError("max_tokens_too_large", f"**max_tokens is too large:** {asked:,} answer tokens were asked for, "
                       f"but the model's context is {limit:,} tokens in all. Lower max_tokens in the settings (gear "
                       "icon).", f"max_tokens {asked} > max_model_len {limit}")  # fmt: skip
    if limit_match := _CONTEXT_LIMIT_RE.search(text):
        limit = int(limit_match.group(1))
        size_match = _PROMPT_SIZE_RE.search(text)
        size = int(size_match.group(1)) if size_match else limit
        return context_too_long(ContextTooLong(prompt_tokens=size, max_model_len=limit), model)
    return UiError("rejected", f"**The model server rejected the request:** {text}", f"rejected: {text[:200]}")


def map_exception(
    exc: BaseException, *, model: str, url: str, status: BackendStatus | None, partial: bool, timeout_s: float
) -> UiError:
    """Turn an exception from the OpenAI client or httpx into a :class:`UiError`.

    ``status`` is a fresh probe taken after a connection failure (to tell Loading from Down); ``partial`` is True
    when part of the answer was already shown.
    """
    if isinstance(exc, openai.APITimeoutError | httpx.TimeoutException):
        return UiError("timeout", f"**No complete answer within {timeout_s:.0f} s.** The server may be overloaded; try "
                       "again, ask for a shorter answer (max_tokens) or raise REQUEST_TIMEOUT_S.",
                       f"timeout after {timeout_s:.0f} s")  # fmt: skip
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.StreamError) or (
        partial and isinstance(exc, openai.APIConnectionError)
    ):
        return stream_cut(partial)
    if isinstance(exc, openai.APIConnectionError | httpx.ConnectError | httpx.NetworkError):
        return backend_unavailable(status, url)
    if isinstance(exc, openai.APIStatusError):
        text, code = _api_message(exc), exc.status_code
        if code == 400:
            return _bad_request(text, model)
        if code == 404:
            return UiError("model_gone", f"**The model `{model}` is not served any more** (the server switched "
                           "models?). The header has been refreshed; send your message again.",
                           f"model not found: {text[:200]}")  # fmt: skip
        if code in (401, 403):
            return UiError("rejected", f"**The model server refused the API key** (HTTP {code}): set VLLM_API_KEY to "
                           "the key vLLM was started with and restart the UI.",
                           f"HTTP {code}: API key refused")  # fmt: skip
        if code >= 500:
            return UiError("server_error", f"**The model server failed** (HTTP {code}: {text}). Try again; if it keeps "
                           "failing, look at `logs/vllm.log`.", f"HTTP {code}: {text[:200]}")  # fmt: skip
        return UiError("rejected", f"**The model server rejected the request** (HTTP {code}): {text}",
                       f"HTTP {code}: {text[:200]}")  # fmt: skip
    if isinstance(exc, openai.APIError):
        text = _api_message(exc)
        if partial:
            return UiError("stream_cut", f"**The answer was cut off:** the model server reported an error mid-stream "
                           f"({text}). The part above is all that arrived; send the message again.",
                           f"error mid-stream: {text[:200]}")  # fmt: skip
        return UiError("server_error", f"**The model server failed:** {text}. Try again; see `logs/vllm.log`.",
                       f"server error: {text[:200]}")  # fmt: skip
    name = type(exc).__name__
    return UiError("unknown", f"**Unexpected error:** {name}: {exc}", f"{name}: {str(exc)[:200]}")
