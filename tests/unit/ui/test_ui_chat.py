"""Chat request building of the UI: history, parameters, context budget and display-safe text."""

from __future__ import annotations

from ui.chat import (
    SEED_QUESTION,
    STARTERS,
    ChatMessage,
    ChatParams,
    append_turn,
    build_messages,
    check_context,
    clean_text,
    escape_directives,
    params_from_values,
    plan_max_tokens,
    request_kwargs,
)

DEFAULTS = ChatParams(temperature=0.0, top_p=1.0, max_tokens=128, system_prompt="")
HISTORY: list[ChatMessage] = [
    {"role": "user", "content": "你好"},
    {"role": "assistant", "content": "你好！有什么可以帮你？"},
]


def test_messages_are_system_then_history_then_user() -> None:
    """The system prompt comes first, earlier turns keep their order, the new message is last."""
    messages = build_messages(HISTORY, "再见", system_prompt="  你是助手  ")
    assert messages == [
        {"role": "system", "content": "你是助手"},
        *HISTORY,
        {"role": "user", "content": "再见"},
    ]


def test_blank_system_prompt_is_left_out() -> None:
    """No system message is sent when the system prompt is empty or blank."""
    assert build_messages([], "hi", system_prompt="   ") == [{"role": "user", "content": "hi"}]


def test_system_entries_in_history_are_not_repeated() -> None:
    """Only the current system prompt is sent, never one stored in the history."""
    history: list[ChatMessage] = [{"role": "system", "content": "old"}, *HISTORY]
    messages = build_messages(history, "q", system_prompt="new")
    assert [m["content"] for m in messages if m["role"] == "system"] == ["new"]


def test_building_does_not_modify_the_history() -> None:
    """The stored history is not changed by building a request."""
    history = list(HISTORY)
    build_messages(history, "q")
    assert history == HISTORY


def test_turn_appends_user_and_answer() -> None:
    """A turn with an answer adds the user message and the answer to the history."""
    history = append_turn(HISTORY, "问题", "回答")
    assert history[-2:] == [{"role": "user", "content": "问题"}, {"role": "assistant", "content": "回答"}]
    assert len(HISTORY) == 2


def test_failed_turn_leaves_history_unchanged() -> None:
    """A turn without answer text (error before any token) is not added to the history."""
    assert append_turn(HISTORY, "问题", "  ") == HISTORY


def test_context_fits_while_one_answer_token_remains() -> None:
    """A prompt of max_model_len - 1 tokens still fits; max_model_len tokens does not."""
    assert check_context(4095, 4096) is None
    problem = check_context(4096, 4096)
    assert problem is not None
    assert (problem.prompt_tokens, problem.max_model_len) == (4096, 4096)


def test_context_problem_tells_message_from_history() -> None:
    """The measured size of the message alone tells whether the history or the message is too long."""
    history_problem = check_context(5000, 4096, message_tokens=300)
    message_problem = check_context(5000, 4096, message_tokens=4500)
    assert history_problem is not None and not history_problem.message_alone_too_long
    assert message_problem is not None and message_problem.message_alone_too_long


def test_max_tokens_is_clamped_to_the_room_left() -> None:
    """max_tokens larger than context minus prompt is lowered to exactly what fits."""
    budget = plan_max_tokens(5000, ui_limit=8192, prompt_tokens=19, max_model_len=4096)
    assert budget.max_tokens == 4077
    assert budget.clamped and budget.limited_by == "context"
    assert budget.requested == 5000


def test_max_tokens_is_clamped_to_the_ui_limit_first() -> None:
    """The whole context as max_tokens (131,072) is lowered to UI_MAX_TOKENS, which is smaller than the room."""
    budget = plan_max_tokens(131_072, ui_limit=4096, prompt_tokens=20, max_model_len=131_072)
    assert budget.max_tokens == 4096 and budget.limited_by == "ui"


def test_ui_limit_applies_without_a_token_count() -> None:
    """Without /tokenize (sizes unknown) the UI limit still bounds the answer."""
    budget = plan_max_tokens(131_072, ui_limit=4096)
    assert budget.max_tokens == 4096 and budget.limited_by == "ui" and budget.room is None


def test_the_context_wins_when_it_is_the_smaller_limit() -> None:
    """When less than UI_MAX_TOKENS fits, the room left is the limit and is named as such."""
    budget = plan_max_tokens(131_072, ui_limit=4096, prompt_tokens=2000, max_model_len=4096)
    assert budget.max_tokens == 2096 and budget.limited_by == "context"


def test_max_tokens_that_fits_is_kept() -> None:
    """A max_tokens that fits is sent unchanged."""
    budget = plan_max_tokens(128, ui_limit=4096, prompt_tokens=19, max_model_len=4096)
    assert budget.max_tokens == 128
    assert not budget.clamped and budget.limited_by is None


def test_max_tokens_never_below_one() -> None:
    """Even a full context yields max_tokens 1 (the context check reports the real problem)."""
    assert plan_max_tokens(10, ui_limit=4096, prompt_tokens=4096, max_model_len=4096).max_tokens == 1


def test_settings_values_are_clipped_and_defaulted() -> None:
    """Out-of-range values are clipped; missing or malformed ones fall back to the defaults."""
    params = params_from_values({"temperature": 9, "top_p": 0, "max_tokens": "abc", "system_prompt": " s "}, DEFAULTS)
    assert params == ChatParams(temperature=2.0, top_p=0.01, max_tokens=128, system_prompt="s")
    assert params_from_values({}, DEFAULTS) == DEFAULTS
    assert params_from_values({"max_tokens": 0.4, "temperature": None}, DEFAULTS).max_tokens == 1


def test_request_streams_with_usage() -> None:
    """The request streams and asks vLLM for the usage chunk (token counts for the timing line)."""
    params = ChatParams(temperature=0.7, top_p=0.9, max_tokens=128)
    kwargs = request_kwargs("m", [{"role": "user", "content": "q"}], params, max_tokens=64)
    assert kwargs["stream"] is True
    assert kwargs["stream_options"] == {"include_usage": True}
    assert (kwargs["model"], kwargs["max_tokens"], kwargs["temperature"], kwargs["top_p"]) == ("m", 64, 0.7, 0.9)


def test_replacement_characters_are_dropped() -> None:
    """U+FFFD from invalid byte sequences never reaches the screen; Chinese text is kept intact."""
    assert clean_text("频率\ufffd和换乘\ufffd") == "频率和换乘"


def test_directive_colons_are_escaped_outside_code() -> None:
    """``a:b`` would be swallowed by the Markdown renderer, so the colon is escaped, except inside code."""
    assert escape_directives("MODEL=synthetic:tiny") == "MODEL=synthetic\\:tiny"
    assert escape_directives("`a:b` and\n```\nstd::vector\n```") == "`a:b` and\n```\nstd::vector\n```"
    assert escape_directives("10:30 http://x 时间：五点") == "10:30 http://x 时间：五点"


def test_starters_begin_with_the_seed_question() -> None:
    """The first starter asks the seed's question."""
    assert STARTERS[0][1] == SEED_QUESTION == "请用三句话解释MoE架构的核心思想"
