"""The request function against scripted SSE byte streams (in-process transport, no sockets)."""

from __future__ import annotations

import itertools
import json

import gevent
import gevent.event

from loadgen.request.client import chat_payload, stream_chat
from loadgen.request.transport import TransportError, TransportTimeout
from tests.fakes import ScriptedTransport

ROLE = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}


def event(obj: object) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


def content(text: str, finish: str | None = None) -> bytes:
    return event({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]})


USAGE = event({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}})
DONE = b"data: [DONE]\n\n"


def run(chunks: list[bytes], status: int = 200, clock_steps: list[float] | None = None, **kw: object):
    transport = ScriptedTransport(chunks, status=status, **kw)  # type: ignore[arg-type]
    ticks = iter(clock_steps) if clock_steps else itertools.count(0.0, 0.01)
    payload = chat_payload("m", [{"role": "user", "content": "你好"}], max_tokens=3, temperature=0.0)
    return stream_chat(
        transport,
        "http://vllm",
        payload,
        timeout_s=5,
        clock=lambda: next(ticks),
    )


def test_complete_stream_counts_usage_tokens_and_chunks() -> None:
    """A normal stream is ok; tokens come from usage, chunks are the client's own count."""
    record = run([event(ROLE), content("你"), content("好"), content("吗", "length"), USAGE, DONE])
    assert record.ok and record.error_kind is None
    assert record.output_tokens == 3 and record.prompt_tokens == 5
    assert record.content_chunks == 3 and record.output_chars == 3
    assert record.finish_reason == "length"


def test_ttft_ignores_role_only_first_chunk() -> None:
    """TTFT is measured at the first non-empty content delta, not at the role-only chunk."""
    # clock: attempt and send at 0, content chunks at 0.5, 0.6, 0.8, end at 1.0 (the role chunk takes no reading)
    record = run(
        [event(ROLE), content("a"), content("b"), content("c"), USAGE, DONE], clock_steps=[0, 0, 0.5, 0.6, 0.8, 1.0]
    )
    assert record.ttft_ms == 500.0
    assert [round(x) for x in record.itl_ms] == [100, 200]
    assert record.e2e_ms == 1000.0


def test_token_without_text_yet_is_timed_as_vllm_stamps_it() -> None:
    """vLLM's shapes: the role chunk leaves in the first token's write, and a token whose text its detokenizer holds
    back (a byte-level BPE piece of a 3-byte character) is sent as ``"content": ""``; the next chunk carries the
    character. TTFT is that first token (as vLLM's own clock stamps it), every token has its gap, none merged."""
    held = content("")  # the first token: half a character, no text yet
    # clock: attempt and send at 0; reads: [role + held token] at 0.5, "字" 0.6, "" 0.7, "好" 0.8 (finish), end 1.0
    record = run(
        [event(ROLE) + held, content("字"), content(""), content("好", "length") + USAGE + DONE],
        clock_steps=[0, 0, 0.5, 0.6, 0.7, 0.8, 1.0],
    )
    assert record.ok, record.error
    assert record.ttft_ms == 500.0
    assert [round(x) for x in record.itl_ms] == [100, 100, 100]
    assert record.content_chunks == 4 and record.output_chars == 2 and record.output_tokens == 3
    assert record.e2e_ms == 1000.0


def test_connecting_is_not_counted_in_ttft() -> None:
    """The clock starts when the request's bytes leave (the transport's on_send), not before the connection: a
    first request that spent 300 ms connecting (pool, name resolution, TCP) still has the server's TTFT."""
    # clock: attempt at 0, connected and sent at 0.3, first token at 0.5, then 0.6, 0.8, end at 1.0
    record = run([event(ROLE), content("a"), content("b"), content("c"), USAGE, DONE],
                 clock_steps=[0, 0.3, 0.5, 0.6, 0.8, 1.0])  # fmt: skip
    assert record.ttft_ms is not None and round(record.ttft_ms) == 200
    assert record.e2e_ms is not None and round(record.e2e_ms) == 700


def test_stream_of_tokens_without_any_text_is_empty_output() -> None:
    """Token chunks that never carry text (every one held back) are still an empty answer."""
    record = run([event(ROLE), content(""), content("", "length"), USAGE, DONE])
    assert not record.ok and record.error_kind == "empty_output"


def test_multibyte_character_split_across_reads_reassembles() -> None:
    """A UTF-8 character whose bytes arrive in two network reads decodes intact."""
    raw = content("模型")
    cut = raw.index("模".encode()) + 1
    record = run([event(ROLE), raw[:cut], raw[cut:], USAGE, DONE])
    assert record.ok and record.output_chars == 2


def test_several_events_in_one_read_and_one_event_across_reads() -> None:
    """Event boundaries are found wherever the reads split the bytes."""
    joined = content("a") + content("b") + content("c")
    across = content("d")
    record = run([event(ROLE) + joined, across[:7], across[7:], USAGE + DONE])
    assert record.content_chunks == 4


def test_comment_and_keepalive_lines_are_ignored() -> None:
    """SSE comments (``: ping``) and blank keep-alives neither break parsing nor count as content."""
    record = run([b": ping\n\n", event(ROLE), b"\n\n", content("a"), b": keep-alive\n\n", USAGE, DONE])
    assert record.ok and record.content_chunks == 1


def test_finish_reason_chunk_keeps_its_text() -> None:
    """The last chunk that carries finish_reason and text contributes its text."""
    record = run([event(ROLE), content("a"), content("尾巴", "stop"), USAGE, DONE])
    assert record.output_chars == 3 and record.finish_reason == "stop"


def test_stream_without_done_is_a_failure_with_cause() -> None:
    """A stream cut before ``[DONE]`` is recorded as no_done, keeping what was measured."""
    record = run([event(ROLE), content("a"), USAGE])
    assert not record.ok and record.error_kind == "no_done"
    assert record.ttft_ms is not None and record.content_chunks == 1


def test_stream_without_content_is_empty_output() -> None:
    """A stream that finishes with no content at all is counted as empty_output."""
    record = run([event(ROLE), USAGE, DONE])
    assert not record.ok and record.error_kind == "empty_output"


def test_missing_usage_falls_back_to_the_chunk_count_and_says_so() -> None:
    """Without usage and without /tokenize the output tokens are the client's chunk count, marked ``chunks``."""
    record = run([event(ROLE), content("a"), content("b", "stop"), DONE], json_routes={"/tokenize": (404, {})})
    assert record.ok and record.output_tokens == 2 and record.output_tokens_source == "chunks"


def test_missing_usage_is_counted_by_the_servers_tokenizer() -> None:
    """Without usage, a server with /tokenize counts the answer text and the prompt; the row says ``tokenize``."""
    transport = ScriptedTransport([event(ROLE), content("ab"), content("c", "stop"), DONE],
                                  json_routes={"/tokenize": (200, {"count": 2, "max_model_len": 4096})})
    payload = chat_payload("m", [{"role": "user", "content": "你好"}], max_tokens=3, temperature=0.0)
    record = stream_chat(transport, "http://vllm-tok", payload, timeout_s=5)
    assert (record.output_tokens, record.prompt_tokens, record.output_tokens_source) == (2, 2, "tokenize")
    assert [url for url, _ in transport.sent] == ["http://vllm-tok/v1/chat/completions", *["http://vllm-tok/tokenize"] * 2]
    bodies = [json.loads(body) for _, body in transport.sent[1:]]
    assert bodies[0] == {"model": "m", "prompt": "abc", "add_special_tokens": False}
    assert bodies[1]["messages"] == [{"role": "user", "content": "你好"}]


def test_usage_is_the_first_source() -> None:
    """With usage in the stream, the counts are the server's and the row says ``usage``."""
    record = run([event(ROLE), content("a"), USAGE, DONE])
    assert record.output_tokens == 3 and record.output_tokens_source == "usage"


def test_invalid_json_data_line_is_invalid_stream() -> None:
    """A data line that is not JSON fails the request with the offending text."""
    record = run([event(ROLE), b"data: {not json\n\n", DONE])
    assert record.error_kind == "invalid_stream" and "not JSON" in (record.error or "")


def test_error_object_inside_stream_is_reported() -> None:
    """vLLM's in-stream error object fails the request with the server's message."""
    record = run([event(ROLE), event({"error": {"message": "engine dead", "code": 500}}), DONE])
    assert record.error_kind == "invalid_stream" and "engine dead" in (record.error or "")


def test_http_error_keeps_status_and_server_message() -> None:
    """A 400 from the server becomes http_status with the server's message (e.g. context too long)."""
    body = json.dumps({"error": {"message": "maximum context length is 4096 tokens", "code": 400}}).encode()
    record = run([body], status=400)
    assert record.error_kind == "http_status" and record.http_status == 400
    assert "4096" in (record.error or "")


def test_connection_refused_is_a_connection_error() -> None:
    """A refused connection is a row with cause connection, not an exception."""
    record = run([], raise_on_send=TransportError("ConnectionRefusedError: refused"))
    assert not record.ok and record.error_kind == "connection"


def test_timeout_is_a_timeout_error() -> None:
    """No answer within the timeout is a row with cause timeout."""
    record = run([], raise_on_send=TransportTimeout("slow"))
    assert record.error_kind == "timeout"


def test_stream_broken_midway_is_a_connection_error() -> None:
    """A connection dropped mid-stream keeps TTFT and records the cause."""
    record = run([event(ROLE), content("a")], error_mid_stream=TransportError("connection closed before the end"))
    assert record.error_kind == "connection" and record.ttft_ms is not None


def test_payload_asks_for_usage_in_the_stream() -> None:
    """The request body streams and asks vLLM to include usage."""
    payload = chat_payload("m", [{"role": "user", "content": "x"}], max_tokens=7, temperature=0.5)
    assert payload["stream"] is True and payload["stream_options"] == {"include_usage": True}
    assert payload["max_tokens"] == 7


def test_complete_stream_keeps_the_connection_for_reuse() -> None:
    """After [DONE] the connection goes back to the pool (keep-alive); a stream abandoned midway is closed."""
    transport = ScriptedTransport([event(ROLE), content("a"), USAGE, DONE])
    payload = chat_payload("m", [{"role": "user", "content": "x"}], max_tokens=3, temperature=0.0)
    assert stream_chat(transport, "http://vllm", payload, timeout_s=5).ok
    assert transport.responses[0].closed_with is True
    cut = ScriptedTransport([event(ROLE), b"data: {broken\n\n", content("a"), USAGE, DONE])
    assert not stream_chat(cut, "http://vllm", payload, timeout_s=5).ok
    assert cut.responses[0].closed_with is False


def test_crlf_line_ends_and_split_crlf_are_one_event_boundary() -> None:
    """Events ended by CRLF CRLF (some proxies) parse alike, also when a CR and its LF arrive in different reads."""
    crlf = [x.replace(b"\n", b"\r\n") for x in (event(ROLE), content("a"), content("b"), USAGE, DONE)]
    joined = b"".join(crlf)
    cut = joined.index(b"\r\n\r\n", len(crlf[0])) + 1  # between a CR and its LF
    record = run([joined[:cut], joined[cut:]])
    assert record.ok and record.content_chunks == 2 and record.output_tokens == 3


def test_http_error_body_that_is_not_json_is_kept_as_text() -> None:
    """A non-JSON error page (a proxy's HTML) becomes the row's message, cut to 500 characters."""
    record = run([b"<html>Bad gateway</html>"], status=502)
    assert record.error_kind == "http_status" and record.http_status == 502 and "Bad gateway" in (record.error or "")


def test_streams_ending_in_one_step_are_stamped_before_any_end_of_request_work() -> None:
    """When several streams' last chunks arrive at once (one step of vLLM's batch), each is stamped on arrival: no
    stream's last gap holds another request's end work (the row, Locust's event, the next request: CPU, no yield)."""
    now = [0.0]
    step = gevent.event.Event()
    transport = ScriptedTransport([event(ROLE), content("a"), step, content("b", "length"), USAGE, DONE])
    payload = chat_payload("m", [{"role": "user", "content": "hi"}], max_tokens=2, temperature=0.0)
    records = []

    def user() -> None:
        records.append(stream_chat(transport, "http://x", payload, timeout_s=5, clock=lambda: now[0]))
        now[0] += 0.015  # 15 ms of end-of-request work that does not yield

    users = [gevent.spawn(user) for _ in range(4)]
    gevent.sleep(0)  # every stream has its first token, stamped at 0
    now[0] = 0.040
    step.set()  # the last step: every stream's last chunk is here at 40 ms
    gevent.joinall(users, timeout=5, raise_error=True)
    assert [r.ok for r in records] == [True] * 4
    assert [r.itl_ms for r in records] == [[40.0]] * 4
