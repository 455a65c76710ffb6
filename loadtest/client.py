"""The one request function: a streamed OpenAI chat completion, timed per chunk, returned as a RequestRecord.

Used by the Locust user, the warmup phase and the tests, so every path measures the same way. Uses ``requests``
with ``stream=True`` and ``iter_content(chunk_size=None)`` (urllib3 hands over each HTTP chunk as it arrives;
checked against a mock server with known timings in the tests) and sseclient-py to split the byte stream into
SSE events, so a multi-byte character split across network reads is decoded only once its event is complete.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import requests
from sseclient import SSEClient

from core.records import ErrorKind, Phase, RequestRecord
from core.streamtiming import StreamTimer, interpret_chunk

CONNECT_TIMEOUT_S = 10.0


def new_session(headers: dict[str, str] | None = None) -> requests.Session:
    """A ``requests.Session`` for vLLM whose every request carries ``headers`` (``Settings.vllm_headers``: the
    ``Authorization: Bearer <VLLM_API_KEY>`` header when vLLM has a key)."""
    session = requests.Session()
    session.headers.update(headers or {})
    return session


def chat_payload(
    model: str, messages: list[dict[str, str]], max_tokens: int, temperature: float, **extra: Any
) -> dict[str, Any]:
    """Body of a streamed ``/v1/chat/completions`` request that asks for ``usage`` in the last chunk."""
    return {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }


def _server_message(response: requests.Response) -> str:
    """The error text of a non-2xx answer (OpenAI error JSON or the raw body), at most 500 characters."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    message = None
    if isinstance(body, dict):
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else error or body.get("message")
    return str(message or body)[:500]


def release(response: requests.Response, reuse: bool) -> None:
    """Hand the connection back for keep-alive after a complete stream (read the chunked terminator first);
    close it after anything else, so a half-read stream never poisons the pool."""
    if reuse:
        try:
            response.raw.read()  # the bytes after [DONE]: the empty terminating chunk
            response.raw.release_conn()
            return
        except (requests.RequestException, OSError, ValueError):
            pass
    response.close()


def stream_chat(
    session: requests.Session,
    base_url: str,
    payload: dict[str, Any],
    *,
    timeout_s: float,
    phase: Phase = "measured",
    request_id: str | None = None,
    clock: Callable[[], float] = time.perf_counter,
    answer: list[str] | None = None,
) -> RequestRecord:
    """Send one streamed chat completion and time it; never raises (any failure is a row with its cause).

    Args:
        session: a ``requests.Session`` (gevent-patched inside Locust).
        base_url: the server's base URL without ``/v1``.
        payload: from :func:`chat_payload`.
        timeout_s: longest wait for the connection or for the next chunk.
        phase: ``warmup`` rows are excluded from statistics.
        request_id: client-side id; a UUID when None.
        clock: monotonic clock in seconds (injectable for tests).
        answer: when given, the answer's text pieces are appended to it (multi-turn sessions send them back).

    Returns:
        A :class:`RequestRecord` timed by :class:`core.streamtiming.StreamTimer` (TTFT, ITL, E2E and the
        completion rules are defined there). Token counts come from the stream's ``usage``; without it from the
        server's ``/tokenize`` where it has one, else from the client's chunk count (``output_tokens_source``).
    """
    rid = request_id or uuid.uuid4().hex
    started_at = time.time()
    pieces: list[str] = answer if answer is not None else []
    try:
        record = _stream(session, base_url, payload, timeout_s, phase, rid, started_at, clock, pieces)
    except Exception as exc:  # a bug of ours must cost one row, never the run
        return RequestRecord(
            request_id=rid,
            phase=phase,
            started_at=started_at,
            max_tokens=payload.get("max_tokens"),
            ok=False,
            error_kind="client_error",
            error=f"{type(exc).__name__}: {exc}"[:500],
        )
    if record.ok and record.output_tokens is None:
        return with_counted_tokens(session, base_url, payload, record, "".join(pieces))
    return record.model_copy(update={"output_tokens_source": "usage"}) if record.output_tokens is not None else record


_NO_TOKENIZE: set[str] = set()  # servers whose /tokenize answered 404/405: not asked again


def server_token_count(session: requests.Session, base_url: str, body: dict[str, Any]) -> int | None:
    """Tokens of ``body`` (``{"model", "prompt"}`` or ``{"model", "messages"}``) by the server's ``/tokenize``
    (vLLM has one); None when the server has none or does not answer."""
    if base_url in _NO_TOKENIZE:
        return None
    try:
        response = session.post(f"{base_url.rstrip('/')}/tokenize", json=body, timeout=10)
    except requests.RequestException:
        return None
    if response.status_code in (404, 405):
        _NO_TOKENIZE.add(base_url)
        return None
    try:
        count = response.json().get("count") if response.status_code == 200 else None
    except (ValueError, AttributeError):
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None


def with_counted_tokens(
    session: requests.Session, base_url: str, payload: dict[str, Any], record: RequestRecord, text: str
) -> RequestRecord:
    """A successful row whose stream carried no usage, with token counts from ``/tokenize`` or the chunk count.

    The server's tokenizer counts the answer text exactly (reasoning included, no special tokens); without it the
    client's count of content chunks stands in (exact for servers that send one token per chunk, vLLM's default).
    """
    model = payload.get("model")
    output = server_token_count(session, base_url, {"model": model, "prompt": text, "add_special_tokens": False})
    if output is None:
        return record.model_copy(update={"output_tokens": record.content_chunks, "output_tokens_source": "chunks"})
    prompt = server_token_count(session, base_url, {"model": model, "messages": payload.get("messages")})
    return record.model_copy(
        update={"output_tokens": output, "prompt_tokens": prompt, "output_tokens_source": "tokenize"}
    )


def _stream(
    session: requests.Session,
    base_url: str,
    payload: dict[str, Any],
    timeout_s: float,
    phase: Phase,
    rid: str,
    started_at: float,
    clock: Callable[[], float],
    pieces: list[str],
) -> RequestRecord:
    """:func:`stream_chat` without its safety net; the text of every chunk is appended to ``pieces``."""
    timer = StreamTimer(clock)
    timer.start()
    base: dict[str, Any] = {
        "request_id": rid,
        "phase": phase,
        "started_at": started_at,
        "max_tokens": payload.get("max_tokens"),
    }

    def failed(kind: ErrorKind, error: str, **fields: Any) -> RequestRecord:
        timer.end()
        return RequestRecord(**base, ok=False, e2e_ms=timer.e2e_ms(), error_kind=kind, error=error, **fields)

    url = f"{base_url.rstrip('/')}/v1/chat/completions"
    try:
        response = session.post(url, json=payload, stream=True, timeout=(min(CONNECT_TIMEOUT_S, timeout_s), timeout_s))
    except requests.Timeout as exc:
        return failed("timeout", f"no response within {timeout_s:.0f} s: {exc}")
    except requests.RequestException as exc:
        return failed("connection", f"{type(exc).__name__}: {exc}")
    if response.status_code != 200:
        return failed("http_status", _server_message(response), http_status=response.status_code)

    try:
        events = SSEClient(response.iter_content(chunk_size=None)).events()  # type: ignore[arg-type]
        for event in events:
            if event.data.strip() == "[DONE]":
                timer.done()
                break
            try:
                obj = json.loads(event.data)
            except ValueError:
                return failed("invalid_stream", f"data line is not JSON: {event.data[:200]!r}", **timer_fields(timer))
            facts = interpret_chunk(obj)
            if facts.invalid:
                return failed("invalid_stream", facts.invalid, **timer_fields(timer))
            if facts.error:
                return failed("invalid_stream", f"server error in stream: {facts.error}", **timer_fields(timer))
            timer.feed(facts)
            if facts.text:
                pieces.append(facts.text)
        else:
            timer.closed()
    except requests.Timeout as exc:
        return failed("timeout", f"no chunk within {timeout_s:.0f} s: {exc}", **timer_fields(timer))
    except (requests.RequestException, OSError) as exc:
        return failed("connection", f"stream broken: {type(exc).__name__}: {exc}", **timer_fields(timer))
    finally:
        release(response, reuse=timer.saw_done)
    measured = timer_fields(timer)
    if not timer.complete:
        return failed("no_done", "stream ended without data: [DONE] or a final finish_reason", **measured)
    if timer.chunks == 0:
        return failed("empty_output", "stream finished without any content", **measured)
    return RequestRecord(**base, ok=True, e2e_ms=timer.e2e_ms(), **measured)


def timer_fields(timer: StreamTimer) -> dict[str, Any]:
    """The row fields a :class:`StreamTimer` measured (TTFT, ITL, tokens, chunks, how the stream ended)."""
    return {
        "ttft_ms": timer.ttft_ms,
        "itl_ms": timer.itl_ms,
        "prompt_tokens": timer.prompt_tokens,
        "output_tokens": timer.completion_tokens,
        "content_chunks": timer.chunks,
        "output_chars": timer.chars,
        "finish_reason": timer.finish_reason,
        "end_reason": timer.end_reason,
        "http_status": 200,
    }
