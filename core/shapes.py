"""What another process sent — an HTTP answer's body, a JSON file it wrote — read as a declared shape: one check at
every I/O edge, and one error (:class:`ShapeError`) that names where the bytes came from and what was wrong with
them (an empty body, an HTML error page, a list where an object belongs, a missing key), never a bare
``JSONDecodeError`` or ``KeyError`` from deep inside a caller."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

T = TypeVar("T")
SNIPPET_CHARS = 80


class ShapeError(ValueError):
    """A body or file is not of the expected shape; ``source`` says where it came from, ``fault`` what was wrong."""

    def __init__(self, source: str, fault: str) -> None:
        super().__init__(f"{source}: {fault}")
        self.source = source
        self.fault = fault


def snippet(raw: bytes | str, limit: int = SNIPPET_CHARS) -> str:
    """The start of ``raw`` as one line of at most ``limit`` characters (whitespace runs collapsed), for a message."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def parse_as(raw: bytes | str, shape: TypeAdapter[T], source: str, expected: str) -> T:
    """``raw`` (JSON text) validated as ``shape`` (a module-level ``TypeAdapter``); ``source`` and ``expected`` ("a JSON
    object with 'tokens'") name it in the message, with the first fault in words: not JSON (with its start), or a
    missing or mistyped field.

    Raises:
        ShapeError: ``raw`` is empty, not JSON, or not of ``shape``.
    """
    if not raw.strip():
        raise ShapeError(source, f"an empty body where {expected} was expected")
    try:
        return shape.validate_json(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
    if first["type"] == "json_invalid":
        raise ShapeError(source, f"not JSON (it starts {snippet(raw)!r}) where {expected} was expected")
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"]).removeprefix(".")
    given = first.get("input")
    shown = snippet(repr(given), 60) if given is not None and first["type"] != "missing" else None
    detail = f"{first['msg']}" + (f" (got {shown})" if shown else "")
    raise ShapeError(source, f"not {expected}: {where + ': ' if where else ''}{detail}")


def answer_as(response: httpx.Response, shape: TypeAdapter[T], expected: str) -> T:
    """The body of ``response`` validated as ``shape`` (:func:`parse_as`, named ``METHOD URL (HTTP status)``, or
    ``an answer (HTTP status)`` when the request is not known).

    Raises:
        ShapeError: the body is empty, not JSON, or not of ``shape``.
    """
    try:
        request = response.request
        source = f"{request.method} {request.url} (HTTP {response.status_code})"
    except RuntimeError:  # a Response built by hand (tests, fakes) has no request
        source = f"an answer (HTTP {response.status_code})"
    return parse_as(response.content, shape, source, expected)


JSON_OBJECT: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
"""Any JSON object: for answers read field by field, where only "an object, not a list or a page" is checked here."""


class ServedModel(BaseModel):
    """One entry of an OpenAI-compatible ``GET /v1/models`` (vLLM adds ``root`` and ``max_model_len``)."""

    model_config = ConfigDict(extra="ignore")

    id: str
    root: str | None = None
    max_model_len: int | None = None


class ModelList(BaseModel):
    """The body of ``GET /v1/models``: ``{"data": [{"id": ...}, ...]}``."""

    model_config = ConfigDict(extra="ignore")

    data: list[ServedModel]


MODEL_LIST = TypeAdapter(ModelList)
MODEL_LIST_SHAPE = 'an OpenAI model list ({"data": [{"id": ...}]})'
