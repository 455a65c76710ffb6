"""Chat request building: history, sampling parameters, the context-length budget and display-safe text (pure)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypedDict

REPLACEMENT_CHAR = "\ufffd"
_CODE_RE = re.compile(r"(```.*?(?:```|$)|`[^`\n]*`)", re.DOTALL)
_DIRECTIVE_RE = re.compile(r"(?<!\\):(?=[A-Za-z:])")


SEED_QUESTION = "请用三句话解释MoE架构的核心思想"
STARTERS: tuple[tuple[str, str], ...] = (
    ("MoE 架构", SEED_QUESTION),
    ("KV Cache", "用通俗的语言解释大模型推理中的KV Cache是什么，它为什么能加速生成？"),
    ("Batching", "What is continuous batching in LLM serving, and why does it raise throughput? Answer briefly."),
    ("写一首诗", "写一首关于秋天的五言绝句。"),
)

TEMPERATURE_RANGE = (0.0, 2.0)
TOP_P_RANGE = (0.01, 1.0)


class ChatMessage(TypedDict):
    """One OpenAI chat message."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class ChatParams:
    """Sampling parameters of one request; ``system_prompt`` empty means none."""

    temperature: float
    top_p: float
    max_tokens: int
    system_prompt: str = ""


@dataclass(frozen=True)
class ContextTooLong:
    """The prompt (history + message) leaves no room for an answer. Sizes in tokens."""

    prompt_tokens: int
    max_model_len: int
    message_tokens: int | None = None  # the new message alone (with chat template), when measured

    @property
    def message_alone_too_long(self) -> bool:
        """True when even without history the message does not fit."""
        return self.message_tokens is not None and self.message_tokens >= self.max_model_len


@dataclass(frozen=True)
class TokenBudget:
    """``max_tokens`` to send and why. Sizes in tokens.

    ``requested`` is what the chat settings asked for; ``ui_limit`` the largest answer the UI asks for
    (UI_MAX_TOKENS); ``prompt_tokens``/``max_model_len`` are the prompt's size and the context, when known (the room
    left after the prompt is the hard limit).
    """

    max_tokens: int
    requested: int
    ui_limit: int
    prompt_tokens: int | None = None
    max_model_len: int | None = None

    @property
    def clamped(self) -> bool:
        """True when ``max_tokens`` was lowered."""
        return self.max_tokens < self.requested

    @property
    def limited_by(self) -> Literal["ui", "context"] | None:
        """What lowered ``max_tokens``: the context left after the prompt, the UI's limit, or nothing."""
        if not self.clamped:
            return None
        return "context" if self.room is not None and self.room <= self.ui_limit else "ui"

    @property
    def room(self) -> int | None:
        """Answer tokens that fit after the prompt (at least 1); None when the sizes are unknown."""
        if self.prompt_tokens is None or self.max_model_len is None:
            return None
        return max(1, self.max_model_len - self.prompt_tokens)


def _clip(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))


def params_from_values(values: Mapping[str, Any], defaults: ChatParams) -> ChatParams:
    """Sampling parameters from the UI's settings form (missing or malformed values fall back to ``defaults``).

    Temperature is clipped to [0, 2], top_p to [0.01, 1], max_tokens to >= 1.
    """

    def number(key: str, default: float) -> float:
        try:
            return float(values.get(key, default))
        except (TypeError, ValueError):
            return default

    system_prompt = values.get("system_prompt", defaults.system_prompt)
    return ChatParams(
        temperature=_clip(number("temperature", defaults.temperature), *TEMPERATURE_RANGE),
        top_p=_clip(number("top_p", defaults.top_p), *TOP_P_RANGE),
        max_tokens=max(1, int(number("max_tokens", defaults.max_tokens))),
        system_prompt=system_prompt.strip() if isinstance(system_prompt, str) else defaults.system_prompt,
    )


def build_messages(history: Sequence[ChatMessage], user_text: str, system_prompt: str = "") -> list[ChatMessage]:
    """The messages to send: optional system prompt, the earlier turns in order, then the new user message."""
    messages: list[ChatMessage] = []
    if system_prompt.strip():
        messages.append({"role": "system", "content": system_prompt.strip()})
    messages.extend({"role": m["role"], "content": m["content"]} for m in history if m["role"] != "system")
    messages.append({"role": "user", "content": user_text})
    return messages


def append_turn(history: Sequence[ChatMessage], user_text: str, answer_text: str) -> list[ChatMessage]:
    """History after a turn; unchanged when there is no answer text (a failed turn is not sent again)."""
    if not answer_text.strip():
        return list(history)
    return [*history, {"role": "user", "content": user_text}, {"role": "assistant", "content": answer_text}]


MIN_ANSWER_SHARE = 4
"""Older turns are trimmed until the answer has room for what was asked, up to a 1/MIN_ANSWER_SHARE of the context:
a long conversation then loses its oldest turns rather than squeezing the answer to a few tokens."""


def turn_count(history: Sequence[ChatMessage]) -> int:
    """Turns in ``history`` (its user messages)."""
    return sum(m["role"] == "user" for m in history)


def drop_oldest_turns(history: Sequence[ChatMessage], turns: int) -> list[ChatMessage]:
    """``history`` without its ``turns`` oldest turns (a user message and what follows it up to the next user
    message); empty when it has no more."""
    starts = [i for i, m in enumerate(history) if m["role"] == "user"]
    return [] if turns >= len(starts) else list(history[starts[turns] :])


def answer_room_wanted(requested: int, ui_limit: int, max_model_len: int) -> int:
    """Answer tokens the context must leave free before older turns are kept: what was asked (and the UI allows),
    at most a :data:`MIN_ANSWER_SHARE`-th of the context."""
    return max(1, min(requested, ui_limit, max_model_len // MIN_ANSWER_SHARE))


def check_context(prompt_tokens: int, max_model_len: int, message_tokens: int | None = None) -> ContextTooLong | None:
    """None when the prompt leaves room for at least one answer token, else the sizes to report."""
    if prompt_tokens < max_model_len:
        return None
    return ContextTooLong(prompt_tokens=prompt_tokens, max_model_len=max_model_len, message_tokens=message_tokens)


def plan_max_tokens(
    requested: int, ui_limit: int, prompt_tokens: int | None = None, max_model_len: int | None = None
) -> TokenBudget:
    """Clamp ``requested`` answer tokens to ``ui_limit`` and to what fits after ``prompt_tokens`` in
    ``max_model_len`` (when both are known), at least 1.

    Callers check :func:`check_context` first; a prompt that fills the context still yields 1 here.
    """
    budget = TokenBudget(
        max_tokens=1, requested=requested, ui_limit=ui_limit, prompt_tokens=prompt_tokens, max_model_len=max_model_len
    )
    limits = [requested, ui_limit] + ([budget.room] if budget.room is not None else [])
    return replace(budget, max_tokens=max(1, min(limits)))


def request_kwargs(model: str, messages: Sequence[ChatMessage], params: ChatParams, max_tokens: int) -> dict[str, Any]:
    """Keyword arguments of ``AsyncOpenAI.chat.completions.create`` for a streamed answer with usage."""
    return {
        "model": model,
        "messages": list(messages),
        "temperature": params.temperature,
        "top_p": params.top_p,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def clean_text(text: str) -> str:
    """Text safe to show: drops U+FFFD, which vLLM emits for byte sequences that are not valid UTF-8."""
    return text.replace(REPLACEMENT_CHAR, "")


def escape_directives(text: str) -> str:
    """Escape ``:name`` outside code, which Chainlit's Markdown (remark-directive) would swallow (``a:b`` -> ``a``)."""
    parts = _CODE_RE.split(text)
    return "".join(part if index % 2 else _DIRECTIVE_RE.sub(r"\\:", part) for index, part in enumerate(parts))
