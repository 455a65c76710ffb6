"""The request function's hot loop: SSE split on bytes, and the fast chunk decoder against interpret_chunk."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from core.streamtiming import interpret_chunk
from loadgen.request.sse import SSEParser, decode_chunk


def events_of(blocks: list[bytes]) -> list[bytes]:
    parser = SSEParser()
    return [data for block in blocks for data in parser.feed(block)]


STREAM = (
    b": ping\n\n"
    b'data: {"a":1}\n\n'
    b"data:no-space\n\n"
    b"event: message\nid: 7\ndata: first\ndata: second\n\n"
    b"retry: 10\n\n"
    b"\n\n"
    + "data: 字\n\n".encode()
    + b"data: [DONE]\n\n"
)
EXPECTED = [b'{"a":1}', b"no-space", b"first\nsecond", "字".encode(), b"[DONE]"]


def test_events_are_the_same_wherever_the_reads_split_the_bytes() -> None:
    """Every split of the stream into two reads, and one byte per read, give the same events."""
    assert events_of([STREAM]) == EXPECTED
    for cut in range(len(STREAM) + 1):
        assert events_of([STREAM[:cut], STREAM[cut:]]) == EXPECTED, cut
    assert events_of([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


@pytest.mark.parametrize("newline", [b"\r\n", b"\r"])
def test_crlf_and_cr_line_ends_split_like_lf(newline: bytes) -> None:
    """CRLF and CR line ends give the same events as LF, however the reads split them."""
    stream = STREAM.replace(b"\n", newline)
    for cut in range(len(stream) + 1):
        assert events_of([stream[:cut], stream[cut:]]) == EXPECTED, cut


def test_an_unfinished_event_stays_pending() -> None:
    """Bytes after the last blank line are not an event yet: kept, they complete with the next read's."""
    parser = SSEParser()
    assert parser.feed(b'data: {"a":1}\n\ndata: {"b"') == [b'{"a":1}']
    assert parser.feed(b':2}\n\n') == [b'{"b":2}']


def chunk(**kw: Any) -> dict[str, Any]:
    return kw


# Shapes with something odd in each place the fast decoder types (counts, texts, choices, error, usage).
CHUNKS: list[Any] = [
    chunk(choices=[{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]),
    chunk(choices=[{"delta": {"role": "assistant", "content": ""}}]),
    chunk(choices=[{"delta": {"content": None, "reasoning_content": "想"}}]),
    chunk(choices=[{"delta": {"content": "a", "reasoning_content": "b", "reasoning": "c"}}]),
    chunk(choices=[{"delta": {"content": "a"}}, {"delta": {"content": "b"}, "finish_reason": "stop"}]),
    chunk(choices=[{"delta": {"content": "a"}, "finish_reason": ""}]),
    chunk(choices=[{"delta": {}, "finish_reason": "length"}]),
    chunk(choices=[{"delta": None}]),
    chunk(choices=[]),
    chunk(choices=None),
    chunk(),
    chunk(choices=[{"delta": {"content": [{"type": "text", "text": "A"}]}}]),
    chunk(choices=[{"delta": {"content": 6}}]),
    chunk(choices=[{"delta": "a"}]),
    chunk(choices=["a"]),
    chunk(choices={"0": {}}),
    chunk(choices=[{"delta": {}, "finish_reason": 1}]),
    chunk(choices=[], usage={"prompt_tokens": 5, "completion_tokens": 2}),
    chunk(choices=[], usage={"prompt_tokens": 5.0, "completion_tokens": True}),
    chunk(choices=[], usage={"prompt_tokens": -1, "completion_tokens": "2"}),
    chunk(choices=[], usage={}),
    chunk(choices=[], usage={"prompt_tokens": 9, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 8},
                             "completion_tokens_details": {"reasoning_tokens": 3}}),
    chunk(choices=[], usage={"prompt_tokens_details": None, "completion_tokens_details": {"reasoning_tokens": -1}}),
    chunk(choices=[], usage={"prompt_tokens_details": 5, "completion_tokens_details": {"reasoning_tokens": "3"}}),
    chunk(choices=[{"delta": {"reasoning": ""}}]),
    chunk(choices=[{"delta": {"reasoning": "", "content": "a"}, "finish_reason": "stop"}]),
    chunk(choices=[], usage=None),
    chunk(choices=[], usage=5),
    chunk(choices=[{"delta": {"content": "a"}}], error=None),
    chunk(error={"message": "engine dead"}),
    chunk(error="overloaded"),
    chunk(error={"code": 500}),
    None,
    [1, 2],
    "hello",
    3,
]


def random_chunk(rng: random.Random) -> Any:
    """A chunk-like object built from the values each field is seen with, good and bad."""
    texts = [None, "", "字", "ab", 6, True, [{"type": "text", "text": "t"}], {"text": "x"}]
    counts = [None, 0, 3, -1, 2.0, True, "4"]
    def delta() -> Any:
        if rng.random() < 0.1:
            return rng.choice([None, "a", 1])
        return {k: rng.choice(texts) for k in ("content", "reasoning_content", "reasoning", "role") if rng.random() < 0.6}
    def choice() -> Any:
        if rng.random() < 0.05:
            return rng.choice(["a", None, 2])
        out: dict[str, Any] = {"index": 0}
        if rng.random() < 0.9:
            out["delta"] = delta()
        if rng.random() < 0.5:
            out["finish_reason"] = rng.choice([None, "", "stop", "length", 1])
        return out
    obj: dict[str, Any] = {"id": "x", "object": "chat.completion.chunk"}
    if rng.random() < 0.9:
        obj["choices"] = rng.choice([None, {"0": 1}]) if rng.random() < 0.05 else [choice() for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.3:
        obj["usage"] = rng.choice([None, 5]) if rng.random() < 0.2 else {"prompt_tokens": rng.choice(counts),
                                                                        "completion_tokens": rng.choice(counts)}
        if isinstance(obj["usage"], dict) and rng.random() < 0.5:
            obj["usage"]["prompt_tokens_details"] = rng.choice([None, 3, {"cached_tokens": rng.choice(counts)}])
            obj["usage"]["completion_tokens_details"] = rng.choice([None, {"reasoning_tokens": rng.choice(counts)}])
    if rng.random() < 0.1:
        obj["error"] = rng.choice([None, "boom", {"message": "m"}, {"code": 1}])
    return obj


def test_fast_decoder_says_what_interpret_chunk_says() -> None:
    """On every listed shape and 20,000 random ones the fast decoder gives interpret_chunk's facts exactly."""
    rng = random.Random(0)
    for obj in [*CHUNKS, *(random_chunk(rng) for _ in range(20_000))]:
        data = json.dumps(obj, ensure_ascii=False).encode()
        assert decode_chunk(data) == interpret_chunk(json.loads(data)), data


def test_not_json_is_a_value_error() -> None:
    """A data line that is not JSON (or not UTF-8) raises ValueError, which the request function reports."""
    for data in (b"{oops", b"", b"\xff\xfe"):
        with pytest.raises(ValueError):
            decode_chunk(data)
