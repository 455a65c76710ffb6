"""Server-sent events on bytes and fast chunk decoding: the hot loop of the request function.

:class:`SSEParser` follows the WHATWG event-stream rules on bytes (a character split across reads is decoded only
once its event is complete). :func:`decode_chunk` decodes the common chunk shapes with a typed msgspec decoder and
falls back to :func:`core.streamtiming.interpret_chunk` (which owns the semantics) for anything else; the fast path
accepts only what that reads the same way (``tests/unit/loadgen/test_sse.py``).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import orjson

from core.streamtiming import ChunkFacts, count_of, interpret_chunk

DONE = b"[DONE]"
_DATA = b"data: "


class SSEParser:
    """Incremental event-stream parser: :meth:`feed` bytes as they arrive, get the complete events' data back
    (CRLF, CR or LF end lines; a blank line ends an event; ``data`` lines join with LF; other fields are ignored)."""

    __slots__ = ("_after_cr", "_rest")

    def __init__(self) -> None:
        self._rest = b""
        self._after_cr = False

    def feed(self, block: bytes) -> list[bytes]:
        """The ``data`` payloads (bytes, without the ``data:`` prefix) of the events completed by ``block``."""
        if self._after_cr and block.startswith(b"\n"):
            block = block[1:]  # the LF of a CRLF whose CR ended the previous read (already a line end)
        if b"\r" in block:  # CRLF or CR line ends: normalise to LF
            self._after_cr = block.endswith(b"\r")
            block = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        else:
            self._after_cr = False
        buf = self._rest + block if self._rest else block
        events = buf.split(b"\n\n")
        self._rest = events.pop()
        out = []
        for event in events:
            if event.startswith(_DATA) and b"\n" not in event:
                out.append(event[6:])  # one "data: ..." line: the usual shape
            elif event:
                data = _event_data(event)
                if data is not None:
                    out.append(data)
        return out


def _event_data(event: bytes) -> bytes | None:
    """The data of one event's lines (joined by ``\\n``), None when it has no ``data`` field."""
    lines: list[bytes] = []
    for line in event.split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        name, colon, value = line.partition(b":")
        if name != b"data":
            continue
        lines.append(value[1:] if colon and value.startswith(b" ") else value)
    return b"\n".join(lines) if lines else None


# --------------------------------------------------------------------------------------------- chunks

_Count = Annotated[int, msgspec.Meta(ge=0)]


class _Delta(msgspec.Struct):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct):
    cached_tokens: Any = None  # any JSON value: only a count is read (interpret_chunk's rule)


class _CompletionDetails(msgspec.Struct):
    reasoning_tokens: Any = None


class _Usage(msgspec.Struct):
    prompt_tokens: _Count | None = None
    completion_tokens: _Count | None = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: None = None  # a non-null error goes the generic way (interpret_chunk reports it)


_TYPED = msgspec.json.Decoder(_Chunk)


def decode_chunk(data: bytes) -> ChunkFacts:
    """What one ``data`` payload says (the same facts as ``interpret_chunk(json.loads(data))``).

    Raises:
        ValueError: ``data`` is not JSON (or not UTF-8).
    """
    try:
        chunk = _TYPED.decode(data)
    except msgspec.ValidationError:
        return interpret_chunk(orjson.loads(data))  # orjson.JSONDecodeError is a ValueError
    except msgspec.DecodeError as exc:
        raise ValueError(str(exc)) from None
    choices = chunk.choices
    if choices is None or len(choices) != 1:  # no or several choices (the usage chunk, n > 1): the generic way
        return interpret_chunk(orjson.loads(data))
    choice = choices[0]
    finish_reason = choice.finish_reason or None
    delta = choice.delta
    answer = reasoning = False
    if delta is None:
        content = text = ""
    else:
        content = delta.content or ""
        text = content
        held = finish_reason is None and delta.role is None
        answer = bool(content) or (held and delta.content is not None)
        if delta.reasoning_content is not None or delta.reasoning is not None:
            thought = (delta.reasoning_content or "") + (delta.reasoning or "")
            text += thought
            reasoning = bool(thought) or held
    token = answer or reasoning
    usage = chunk.usage
    if usage is None:
        return ChunkFacts(text, content, finish_reason, token=token, answer=answer, reasoning=reasoning)
    thinking = usage.completion_tokens_details
    cached = usage.prompt_tokens_details
    return ChunkFacts(text, content, finish_reason, usage.prompt_tokens, usage.completion_tokens, True, token=token,
                      answer=answer, reasoning=reasoning,
                      reasoning_tokens=None if thinking is None else count_of(thinking.reasoning_tokens),
                      cached_tokens=None if cached is None else count_of(cached.cached_tokens))  # fmt: skip
