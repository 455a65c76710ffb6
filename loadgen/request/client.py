"""The one request function (Locust users, warmup, calibration, tests): a streamed chat completion, timed per chunk,
returned as a RequestRecord. HTTP: :mod:`loadgen.request.transport`; SSE and chunks: :mod:`loadgen.request.sse`.

After a stream's last chunk the function lets gevent's loop run until idle before its end work, so chunks of other
streams that already arrived are stamped first: streams ending in the same vLLM step would otherwise carry each
other's end work in their last gap (+0.06 ms per token in ``make bench-peer``). vLLM's asyncio client gets this order
from its event loop.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import gevent
import orjson

from core.records import ErrorKind, Phase, RequestRecord
from core.streamtiming import StreamTimer, count_of
from loadgen.request.sse import DONE, SSEParser, decode_chunk
from loadgen.request.transport import HttpSession, Response, Transport, TransportError, TransportTimeout

TOKENIZE_TIMEOUT_S = 10.0


def new_session(max_connections: int = 1, headers: Mapping[str, str] | None = None) -> HttpSession:
    """The HTTP session of every path: ``max_connections`` (1 per closed-loop user, requests in flight for the
    open-loop dispatcher); ``headers`` go with every request."""
    return HttpSession(max_connections=max_connections, headers=headers)


def chat_payload(model: str, messages: list[dict[str, str]], max_tokens: int, temperature: float,
                 **extra: Any) -> dict[str, Any]:
    """Body of a streamed ``/v1/chat/completions`` request that asks for ``usage`` in the last chunk."""
    return {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature, "stream": True,
            "stream_options": {"include_usage": True}, **extra}


def _server_message(body: bytes) -> str:
    """The error text of a non-2xx answer (OpenAI error JSON or the raw body), at most 500 characters."""
    try:
        parsed = orjson.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")[:500]
    message = None
    if isinstance(parsed, dict):
        error = parsed.get("error")
        message = error.get("message") if isinstance(error, dict) else error or parsed.get("message")
    return str(message or parsed)[:500]


def stream_chat(session: Transport, base_url: str, payload: dict[str, Any], *, timeout_s: float,
                phase: Phase = "measured", request_id: str | None = None,
                clock: Callable[[], float] = time.perf_counter, answer: list[str] | None = None,
                timer: StreamTimer | None = None) -> RequestRecord:
    """Send one streamed chat completion and time it; never raises (a failure is a row with its cause).

    Args:
        session: any :class:`loadgen.request.transport.Transport`; base_url: without ``/v1``;
        payload: from :func:`chat_payload`; timeout_s: longest wait for the connection or the next chunk;
        phase: ``warmup`` rows are left out of statistics; request_id: a UUID when None; clock: monotonic s;
        answer: receives the answer's text pieces (multi-turn sessions); timer: the
            :class:`core.streamtiming.StreamTimer` to use (replaces ``clock``), kept by a caller that may cancel.

    Returns:
        A :class:`RequestRecord` (TTFT, ITL, E2E as :class:`StreamTimer` defines them); token counts from the
        stream's ``usage``, else ``/tokenize``, else the chunk count (``output_tokens_source``).
    """
    base: dict[str, Any] = {"request_id": request_id or uuid.uuid4().hex, "phase": phase, "started_at": time.time(),
                            "max_tokens": payload.get("max_tokens")}  # fmt: skip
    pieces: list[str] = answer if answer is not None else []
    try:
        record = _stream(session, base_url, payload, timeout_s, base, timer or StreamTimer(clock), pieces)
    except Exception as exc:  # a bug of ours must cost one row, never the run
        return RequestRecord(**base, ok=False, error_kind="client_error", error=f"{type(exc).__name__}: {exc}"[:500])
    if not record.ok or record.output_tokens is not None:
        return record
    # usage-less: counts from /tokenize (the answer text, no special tokens), else the content chunk count (exact for
    # one token per chunk, vLLM's default)
    model = payload.get("model")
    text = "".join(pieces)
    output = server_token_count(session, base_url, {"model": model, "prompt": text, "add_special_tokens": False})
    if output is None:
        return record.model_copy(update={"output_tokens": record.content_chunks, "output_tokens_source": "chunks"})
    prompt = server_token_count(session, base_url, {"model": model, "messages": payload.get("messages")})
    return record.model_copy(update={"output_tokens": output, "prompt_tokens": prompt,
                                     "output_tokens_source": "tokenize"})


_NO_TOKENIZE: set[str] = set()  # servers whose /tokenize answered 404/405: not asked again


def server_token_count(session: Transport, base_url: str, body: dict[str, Any]) -> int | None:
    """Tokens of ``body`` (``{"model", "prompt"}`` or ``{"model", "messages"}``) by the server's ``/tokenize``
    (vLLM has one); None when the server has none or does not answer."""
    if base_url in _NO_TOKENIZE:
        return None
    try:
        response = session.post(f"{base_url.rstrip('/')}/tokenize", orjson.dumps(body), timeout_s=TOKENIZE_TIMEOUT_S)
    except TransportError:
        return None
    ended = False
    try:
        raw = response.read_body()
        ended = True
    except TransportError:
        return None
    finally:
        response.close(reuse=ended)
    if response.status in (404, 405):
        _NO_TOKENIZE.add(base_url)
        return None
    try:
        answer = orjson.loads(raw) if response.status == 200 else None
    except ValueError:
        return None
    return count_of(answer.get("count")) if isinstance(answer, dict) else None


def _stream(session: Transport, base_url: str, payload: dict[str, Any], timeout_s: float, base: dict[str, Any],
            timer: StreamTimer, pieces: list[str]) -> RequestRecord:
    """:func:`stream_chat` without its safety net: ``base`` holds the row's id fields; the text of every chunk is
    appended to ``pieces``."""
    timer.start()  # again by the transport right before the request's bytes leave (on_send): connecting is not TTFT

    def failed(kind: ErrorKind, error: str, **fields: Any) -> RequestRecord:
        timer.end()
        return RequestRecord(**base, ok=False, e2e_ms=timer.e2e_ms(), error_kind=kind, error=error, **fields)

    url = f"{base_url.rstrip('/')}/v1/chat/completions"
    try:
        response = session.post(url, orjson.dumps(payload), timeout_s=timeout_s, on_send=timer.start)
    except TransportTimeout as exc:
        return failed("timeout", f"no response within {timeout_s:.0f} s: {exc}")
    except TransportError as exc:
        return failed("connection", str(exc))
    try:
        if response.status != 200:
            return failed("http_status", _server_message(response.read_body()), http_status=response.status)
        problem = read_events(response, timer, pieces)
        gevent.idle()  # before this request's end work: see the module's docstring
    except TransportTimeout as exc:
        return failed("timeout", f"no chunk within {timeout_s:.0f} s: {exc}", **timer_fields(timer))
    except TransportError as exc:
        return failed("connection", f"stream broken: {exc}", **timer_fields(timer))
    finally:
        response.close(reuse=timer.saw_done)
    measured = timer_fields(timer)
    if problem:
        return failed("invalid_stream", problem, **measured)
    if not timer.complete:
        return failed("no_done", "stream ended without data: [DONE] or a final finish_reason", **measured)
    if timer.chars == 0:
        return failed("empty_output", "stream finished without any content", **measured)
    return RequestRecord(**base, ok=True, e2e_ms=timer.e2e_ms(), **measured)


def read_events(response: Response, timer: StreamTimer, pieces: list[str]) -> str | None:
    """Feed ``timer`` the stream's chunks until ``[DONE]`` or the body's end, appending each chunk's text to
    ``pieces``; return None or why the stream is invalid (not JSON, wrong shape, a server error; reading stops).

    Raises:
        TransportTimeout, TransportError: from the transport.
    """
    parser = SSEParser()
    feed, append = timer.feed, pieces.append
    for block in response.blocks():
        for data in parser.feed(block):
            if data[:1] != b"{" and data.strip() == DONE:  # chunks are objects: only look closer at the rest
                timer.done()
                return None
            try:
                facts = decode_chunk(data)
            except ValueError:
                return f"data line is not JSON: {data[:200].decode('utf-8', 'replace')!r}"
            if facts.invalid:
                return facts.invalid
            if facts.error:
                return f"server error in stream: {facts.error}"
            feed(facts)
            if facts.text:
                append(facts.text)
    timer.closed()
    return None


def partial_fields(timer: StreamTimer) -> dict[str, Any]:
    """What a request cancelled mid-stream had received: TTFT (None before the first token), gaps, chunks, chars
    (vLLM's histograms count such requests too)."""
    return {"ttft_ms": timer.ttft_ms, "itl_ms": list(timer.itl_ms), "content_chunks": timer.chunks,
            "output_chars": timer.chars}  # fmt: skip


def timer_fields(timer: StreamTimer) -> dict[str, Any]:
    """The row fields a :class:`StreamTimer` measured (with ``output_tokens_source`` ``usage`` when usage counted,
    ``cached_tokens`` when given, and a reasoning stream's first-token times and token split)."""

    fields: dict[str, Any] = {**partial_fields(timer), "prompt_tokens": timer.prompt_tokens,
                              "output_tokens": timer.completion_tokens, "finish_reason": timer.finish_reason,
                              "end_reason": timer.end_reason, "http_status": 200}
    if timer.completion_tokens is not None:
        fields["output_tokens_source"] = "usage"
    if timer.cached_tokens is not None:
        fields["cached_tokens"] = timer.cached_tokens
    split = timer.token_split()
    if split is not None:  # a reasoning stream: both first-token times and the token split
        fields.update(reasoning_ttft_ms=timer.reasoning_ttft_ms, answer_ttft_ms=timer.answer_ttft_ms,
                      reasoning_tokens=split[0], answer_tokens=split[1], reasoning_tokens_source=split[2])  # fmt: skip
    return fields
