"""Every chunk shape has a defined outcome: the request function never raises, and each row says why it failed.

Table-driven over the shapes seen from OpenAI-compatible servers and over malformed ones; the same interpretation
(:func:`core.streamtiming.interpret_chunk`) serves the benchmark and the chat UI.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from core.streamtiming import StreamTimer, interpret_chunk
from loadgen.request.client import chat_payload, stream_chat
from tests.fakes import ScriptedTransport

ROLE = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
USAGE = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}
DONE = b"data: [DONE]\n\n"


def ev(obj: Any) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


def delta(**fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": None}]}


def fin(reason: str = "stop") -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}


def run(events: list[bytes]):
    transport = ScriptedTransport(events, json_routes={"/tokenize": (404, {})})
    ticks = itertools.count(0.0, 0.01)
    payload = chat_payload("m", [{"role": "user", "content": "x"}], max_tokens=8, temperature=0.0)
    return stream_chat(transport, "http://shapes", payload, timeout_s=5, clock=lambda: next(ticks))


# (name, stream, expected: "ok" with the joined text length, or the error kind and a fragment of its message)
CASES: list[tuple[str, list[bytes], tuple[str, str]]] = [
    ("vLLM: role chunk, content, usage, [DONE]", [ev(ROLE), ev(delta(content="ab")), ev(fin()), ev(USAGE), DONE],
     ("ok", "2")),
    ("transformers serve: finish + usage, then close without [DONE]",
     [ev(ROLE), ev(delta(content="ab")), ev({**fin(), "usage": USAGE["usage"]})], ("ok", "2")),
    ("content as a list of text parts", [ev(delta(content=[{"type": "text", "text": "A"}, {"type": "text", "text": "B"}])),
                                         ev(fin()), DONE], ("ok", "2")),
    ("reasoning before content", [ev(delta(reasoning_content="想")), ev(delta(content="答")), ev(fin()), DONE],
     ("ok", "2")),
    ('"error": null is not an error', [ev({**delta(content="a"), "error": None}), ev(fin()), DONE], ("ok", "1")),
    ("null choices and null delta", [ev({"choices": None}), ev({"choices": [{"delta": None}]}),
                                     ev(delta(content="a")), ev(fin()), DONE], ("ok", "1")),
    ("non-text content part is skipped", [ev(delta(content=[{"type": "image_url", "image_url": {}},
                                                            {"type": "text", "text": "a"}])), ev(fin()), DONE],
     ("ok", "1")),
    ("content is a number", [ev(delta(content=6)), DONE], ("invalid_stream", "content is a number (6)")),
    ("content is an object", [ev(delta(content={"text": "a"})), DONE], ("invalid_stream", "content is an object")),
    ("content list holding a number", [ev(delta(content=[1])), DONE], ("invalid_stream", "a list holding a number")),
    ("a data line that is null", [ev(None), DONE], ("invalid_stream", "is null")),
    ("a data line that is an array", [ev([1, 2]), DONE], ("invalid_stream", "is a list")),
    ("a data line that is a string", [ev("hello"), DONE], ("invalid_stream", "is a string")),
    ("usage that is not an object", [ev(delta(content="a")), ev({"choices": [], "usage": 5}), DONE],
     ("invalid_stream", "usage is a number")),
    ("choices that is not a list", [ev({"choices": {"0": {}}}), DONE], ("invalid_stream", "choices is an object")),
    ("a choice that is not an object", [ev({"choices": ["a"]}), DONE], ("invalid_stream", "a choice is a string")),
    ("delta that is not an object", [ev({"choices": [{"delta": "a"}]}), DONE], ("invalid_stream", "delta is a string")),
    ("finish_reason that is not a string", [ev({"choices": [{"delta": {}, "finish_reason": 1}]}), DONE],
     ("invalid_stream", "finish_reason is a number")),
    ("an error object mid-stream", [ev(delta(content="a")), ev({"error": {"message": "engine dead"}})],
     ("invalid_stream", "engine dead")),
    ("an error string mid-stream", [ev({"error": "overloaded"})], ("invalid_stream", "overloaded")),
    ("not JSON", [b"data: {oops\n\n", DONE], ("invalid_stream", "not JSON")),
    ("close without finish_reason or [DONE]", [ev(delta(content="a"))], ("no_done", "without data: [DONE]")),
    ("[DONE] with no content", [ev(ROLE), DONE], ("empty_output", "without any content")),
]


@pytest.mark.parametrize(("name", "events", "expected"), CASES, ids=[c[0] for c in CASES])
def test_every_chunk_shape_has_an_outcome(name: str, events: list[bytes], expected: tuple[str, str]) -> None:
    """The request function returns a row for every shape: ok with the text, or failed naming the shape."""
    record = run(events)
    kind, detail = expected
    if kind == "ok":
        assert record.ok, record.error
        assert record.output_chars == int(detail)
        assert record.end_reason in ("done", "finish_then_close")
    else:
        assert not record.ok and record.error_kind == kind, (record.error_kind, record.error)
        assert detail in (record.error or ""), record.error


def test_a_bug_in_the_client_is_a_row_not_an_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever goes wrong inside the request function becomes a ``client_error`` row naming the exception."""
    import loadgen.request.client as client

    def broken(*_: Any, **__: Any) -> Any:
        raise TypeError("can only concatenate str (not 'int') to str")

    monkeypatch.setattr(client, "decode_chunk", broken)
    record = run([ev(delta(content="a")), DONE])
    assert not record.ok and record.error_kind == "client_error" and "TypeError" in (record.error or "")


def test_completion_rules() -> None:
    """Complete on [DONE], or on a clean close after a finish_reason; truncated otherwise."""
    done, closed, cut = StreamTimer(), StreamTimer(), StreamTimer()
    for timer in (done, closed, cut):
        timer.start()
        timer.feed(interpret_chunk(delta(content="a")))
    done.done()
    closed.feed(interpret_chunk(fin()))
    closed.closed()
    cut.closed()
    assert (done.end_reason, closed.end_reason, cut.end_reason) == ("done", "finish_then_close", "truncated")
    assert done.complete and closed.complete and not cut.complete
