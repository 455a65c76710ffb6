"""The one stream-timing primitive: what a streamed chat-completion chunk says, and a whole stream's timing.

TTFT: send -> first chunk carrying a generated token (text, reasoning, or an empty text field without role or
finish_reason: vLLM's held-back byte-level token); ITL: every gap between token chunks; E2E: send -> stream end.
Reasoning streams also stamp the first reasoning and first answer token. A stream is complete on ``[DONE]`` or a
clean close after a ``finish_reason``, else truncated (:data:`EndReason`). ``content`` may be a string, null or a
list of text parts; anything else makes the chunk invalid (:attr:`ChunkFacts.invalid`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

EndReason = Literal["done", "finish_then_close", "truncated"]
TEXT_FIELDS = ("content", "reasoning_content", "reasoning")
JSON_KINDS: dict[type, str] = {str: "a string", list: "a list", dict: "an object", type(None): "null"}


@dataclass(slots=True)  # not frozen: a frozen dataclass costs ~0.6 µs more per chunk to build; treat as read-only
class ChunkFacts:
    """What one chunk says: ``text`` (content and reasoning, timed), ``content`` (the answer alone), ``invalid`` (a
    shape problem), ``error`` (a server error's message), ``token``/``answer``/``reasoning`` (what it carries), usage's
    ``reasoning_tokens``/``cached_tokens`` (None: absent). Field order matters: built by position."""

    text: str = ""
    content: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    has_usage: bool = False
    error: str | None = None
    invalid: str | None = None
    token: bool = False
    answer: bool = False
    reasoning: bool = False
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None


def _shape(value: Any) -> str:
    """A JSON value's kind for messages: ``a number (6)``, ``an object``, ``a list``..."""
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    return JSON_KINDS.get(type(value), type(value).__name__)


def _text(value: Any, where: str) -> tuple[str, str | None]:
    """``(text, problem)`` of a content/reasoning value: a string, null, or a list of text parts."""
    if value is None:
        return "", None
    if isinstance(value, str):
        return value, None
    if isinstance(value, list):
        parts = []
        for part in value:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict) and part.get("type") not in (None, "text"):
                continue  # a non-text part (an image, audio) carries no tokens of text
            else:
                return "", f"{where} is a list holding {_shape(part)}, expected text parts"
        return "".join(parts), None
    return "", f"{where} is {_shape(value)}, expected a string, null or a list of text parts"


def count_of(value: Any) -> int | None:
    """``value`` when it is a token count (an integer >= 0, not a boolean), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _detail(usage: dict[str, Any], part: str, name: str) -> int | None:
    """``usage[part][name]`` when it is a count (``prompt_tokens_details.cached_tokens``...), else None."""
    details = usage.get(part)
    return count_of(details.get(name)) if isinstance(details, dict) else None


def interpret_chunk(obj: Any) -> ChunkFacts:
    """What a parsed ``data:`` JSON value says (never raises; ``invalid``: not OpenAI's shape)."""
    if not isinstance(obj, dict):
        return ChunkFacts(invalid=f"a data line is {_shape(obj)}, expected a chunk object")
    error = obj.get("error")
    if error is not None:
        message = error.get("message") if isinstance(error, dict) else error
        return ChunkFacts(error=str(message or error)[:500])
    usage = obj.get("usage")
    if usage is not None and not isinstance(usage, dict):
        return ChunkFacts(invalid=f"usage is {_shape(usage)}, expected an object")
    counts = usage or {}
    choices = [] if obj.get("choices") is None else obj["choices"]
    if not isinstance(choices, list):
        return ChunkFacts(invalid=f"choices is {_shape(choices)}, expected a list")
    texts: list[str] = []
    content: list[str] = []
    finish_reason = None
    answer = reasoning = False
    for choice in choices:
        if not isinstance(choice, dict):
            return ChunkFacts(invalid=f"a choice is {_shape(choice)}, expected an object")
        delta = {} if choice.get("delta") is None else choice["delta"]
        if not isinstance(delta, dict):
            return ChunkFacts(invalid=f"delta is {_shape(delta)}, expected an object")
        reason = choice.get("finish_reason")
        # a present but empty field without role or finish_reason is a token whose text is held back (empty now):
        # vLLM's clock counts it
        held = not reason and delta.get("role") is None
        for name in TEXT_FIELDS:
            value = delta.get(name)
            text, problem = _text(value, name)
            if problem:
                return ChunkFacts(invalid=problem)
            texts.append(text)
            if name == "content":
                content.append(text)
                answer = answer or bool(text) or (held and value is not None)
            else:
                reasoning = reasoning or bool(text) or (held and value is not None)
        if reason is not None and not isinstance(reason, str):
            return ChunkFacts(invalid=f"finish_reason is {_shape(reason)}, expected a string or null")
        finish_reason = reason or finish_reason
    return ChunkFacts(
        text="".join(texts),
        content="".join(content),
        finish_reason=finish_reason,
        prompt_tokens=count_of(counts.get("prompt_tokens")),
        completion_tokens=count_of(counts.get("completion_tokens")),
        has_usage=usage is not None,
        token=answer or reasoning,
        answer=answer,
        reasoning=reasoning,
        reasoning_tokens=_detail(counts, "completion_tokens_details", "reasoning_tokens"),
        cached_tokens=_detail(counts, "prompt_tokens_details", "cached_tokens"),
    )


@dataclass
class StreamTimer:
    """Timing and completion of one streamed answer: ``clock`` in s, figures in ms from :meth:`start`."""

    clock: Callable[[], float] = time.perf_counter
    t0: float | None = None
    first_s: float | None = None
    last_s: float | None = None
    end_s: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    chunks: int = 0  # token chunks (module docstring), text or not
    chars: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    saw_done: bool = False
    closed_cleanly: bool = False
    first_answer_s: float | None = None  # the first content token (module docstring: reasoning streams)
    first_reasoning_s: float | None = None  # the first reasoning token; None: the stream carried no reasoning
    answer_chunks: int = 0  # token chunks carrying an answer token
    reasoning_chunks: int = 0  # token chunks carrying a reasoning token
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens

    def start(self) -> None:
        """The request is being sent now."""
        self.t0 = self.clock()

    def feed(self, facts: ChunkFacts) -> None:
        """One valid chunk arrived now (a token chunk stamps TTFT/ITL; usage and finish_reason are kept)."""
        if facts.token:
            now = self.clock()
            if self.first_s is None:
                self.first_s = now
            elif self.last_s is not None:
                self.itl_ms.append((now - self.last_s) * 1000.0)
            self.last_s = now
            self.chunks += 1
            self.chars += len(facts.text)
            if facts.reasoning:
                self.reasoning_chunks += 1
                if self.first_reasoning_s is None:
                    self.first_reasoning_s = now
            if facts.answer:
                self.answer_chunks += 1
                if self.first_answer_s is None:
                    self.first_answer_s = now
        if facts.has_usage:
            self.prompt_tokens = facts.prompt_tokens
            self.completion_tokens = facts.completion_tokens
            self.reasoning_tokens = facts.reasoning_tokens
            self.cached_tokens = facts.cached_tokens
        self.finish_reason = facts.finish_reason or self.finish_reason

    def done(self) -> None:
        """``data: [DONE]`` arrived: the stream is complete."""
        self.saw_done = True
        self.end()

    def closed(self) -> None:
        """The server closed the stream cleanly (no error) without ``[DONE]``."""
        self.closed_cleanly = True
        self.end()

    def end(self) -> None:
        """The stream ended now (first call wins)."""
        if self.end_s is None:
            self.end_s = self.clock()

    @property
    def end_reason(self) -> EndReason:
        """``done`` ([DONE] seen), ``finish_then_close`` (clean close after a finish_reason) or ``truncated``."""
        if self.saw_done:
            return "done"
        if self.closed_cleanly and self.finish_reason is not None:
            return "finish_then_close"
        return "truncated"

    @property
    def complete(self) -> bool:
        """True when the stream ended by the completion rules (module docstring)."""
        return self.end_reason != "truncated"

    def _ms(self, at: float | None) -> float | None:
        return None if at is None or self.t0 is None else (at - self.t0) * 1000.0

    @property
    def ttft_ms(self) -> float | None:
        """Send → first text chunk, ms; None before any text."""
        return self._ms(self.first_s)

    @property
    def reasoning_ttft_ms(self) -> float | None:
        """Send → first reasoning token, ms; None when the stream carried no reasoning (yet)."""
        return self._ms(self.first_reasoning_s)

    @property
    def answer_ttft_ms(self) -> float | None:
        """Send → first answer (``content``) token, ms; None before one."""
        return self._ms(self.first_answer_s)

    def token_split(self) -> tuple[int, int, str] | None:
        """``(reasoning tokens, answer tokens, source)`` of a stream that reasoned, else None; source ``usage``
        (``completion_tokens_details``) or ``chunks`` (the client's count)."""
        if self.first_reasoning_s is None and not self.reasoning_tokens:
            return None
        if self.reasoning_tokens is not None and self.completion_tokens is not None:
            return self.reasoning_tokens, max(0, self.completion_tokens - self.reasoning_tokens), "usage"
        return self.reasoning_chunks, self.answer_chunks, "chunks"

    def e2e_ms(self) -> float | None:
        """Send → end of stream (or now, while it is still open), ms."""
        return self._ms(self.end_s if self.end_s is not None else self.clock())
