"""Markdown of an answer: the clamp notice, the text, then the timing line and its legend (or the error) (pure)."""

from __future__ import annotations

from ui.chat import escape_directives
from ui.chat_errors import UiError
from ui.timing import Timing, format_timing, timing_legend

EMPTY_ANSWER = "(No visible text: the model produced only whitespace or invalid characters.)"


def notice_markdown(notice: str) -> str:
    """The clamp notice as a quote at the top of the answer (streamed before the first token, kept at the end)."""
    return f"> **Note:** {notice}"


def answer_markdown(answer: str, timing: Timing | None, notice: str | None, error: UiError | None) -> str:
    """Final content of an assistant message.

    The max_tokens notice (when clamped) comes first, where it was shown while streaming. Ok: ``answer``, a rule,
    then ``Total: .. | Prompt: .. | Gen: ..`` with its legend line. Error: the partial answer (if any), a rule, then
    the error in the user's words.
    """
    parts: list[str] = [notice_markdown(notice)] if notice else []
    if answer.strip():
        parts.append(escape_directives(answer))
    elif error is None:
        parts.append(f"*{EMPTY_ANSWER}*")
    footer: list[str] = []
    if error is not None:
        footer.append(error.message)
    elif timing is not None:
        footer.append(f"`{format_timing(timing)}`  \n*{timing_legend(timing)}*")
    if len(parts) > (1 if notice else 0) and footer:
        parts.append("---")
    parts.extend(footer)
    return "\n\n".join(parts)
