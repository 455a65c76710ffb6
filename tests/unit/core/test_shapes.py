"""core.shapes: a peer's body read as a declared shape, each fault in words with its source — never a bare
JSONDecodeError or KeyError."""

from __future__ import annotations

import httpx
import pytest

from core.shapes import MODEL_LIST, MODEL_LIST_SHAPE, ShapeError, answer_as, parse_as, snippet


@pytest.mark.parametrize(("raw", "fault"), [
    (b"", "an empty body where " + MODEL_LIST_SHAPE + " was expected"),
    (b"  \n", "an empty body"),
    (b"<!DOCTYPE html>\n<html><body>Bad gateway</body></html>", "not JSON (it starts '<!DOCTYPE html> <html><body>Bad"),
    (b"[1, 2]", "not " + MODEL_LIST_SHAPE + ": Input should be an object (got [1, 2])"),
    (b'{"object": "list"}', "not " + MODEL_LIST_SHAPE + ": data: Field required"),
    (b'{"data": [{"id": "a"}, {"root": "b"}]}', "data[1].id: Field required"),
    (b'{"data": [{"id": 7}]}', "data[0].id: Input should be a valid string (got 7)"),
])  # fmt: skip
def test_each_bad_body_is_a_shape_error_naming_source_and_fault(raw: bytes, fault: str) -> None:
    """Empty, not JSON, a list for an object, a missing or mistyped field: one ShapeError, source first."""
    with pytest.raises(ShapeError) as caught:
        parse_as(raw, MODEL_LIST, "GET http://h/v1/models (HTTP 200)", MODEL_LIST_SHAPE)
    assert str(caught.value).startswith("GET http://h/v1/models (HTTP 200): ") and fault in str(caught.value)
    assert caught.value.source == "GET http://h/v1/models (HTTP 200)" and isinstance(caught.value, ValueError)


def test_a_good_body_is_the_shape_and_an_answer_names_its_request() -> None:
    """A model list validates (extra fields ignored); an httpx answer's source is its method, URL and status."""
    listed = parse_as(b'{"object": "list", "data": [{"id": "m", "max_model_len": 4096, "x": 1}]}', MODEL_LIST, "s", "e")
    assert [(m.id, m.max_model_len, m.root) for m in listed.data] == [("m", 4096, None)]
    response = httpx.Response(502, content=b"<html>", request=httpx.Request("GET", "http://h:1/v1/models"))
    with pytest.raises(ShapeError, match=r"^GET http://h:1/v1/models \(HTTP 502\): not JSON"):
        answer_as(response, MODEL_LIST, MODEL_LIST_SHAPE)
    assert snippet("a\n  b" + "c" * 200, 10) == "a bcccccc…"
