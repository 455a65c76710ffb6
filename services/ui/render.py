"""Markdown of a finished answer: the text, then the timing line (or the error) under it (pure)."""

from __future__ import annotations

from services.ui.chat import escape_directives
from services.ui.errors import UiError
from services.ui.timing import Timing, format_timing

EMPTY_ANSWER = "(No visible text: the model produced only whitespace or invalid characters.)"


def answer_markdown(answer: str, timing: Timing | None, notice: str | None, error: UiError | None) -> str:
    """Final content of an assistant message.

    Ok: ``answer``, a rule, then ``Total: .. | Prompt: .. | Gen: ..`` (and the max_tokens notice when clamped).
    Error: the partial answer (if any), a rule, then the error in the user's words.
    """
    parts: list[str] = []
    if answer.strip():
        parts.append(escape_directives(answer))
    elif error is None:
        parts.append(f"*{EMPTY_ANSWER}*")
    footer: list[str] = []
    if error is not None:
        footer.append(error.message)
    elif timing is not None:
        footer.append(f"`{format_timing(timing)}`")
    if notice:
        footer.append(f"Note: {notice}")
    if parts and footer:
        parts.append("---")
    parts.extend(footer)
    return "\n\n".join(parts)
