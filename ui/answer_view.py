"""The answer on screen: streamed pieces grouped into fewer UI updates, so fast models do not flood the browser with
one event per token, and the final Markdown (the clamp notice, the text, then the timing line and its legend, or the
error)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from ui.chat import escape_directives
from ui.chat_errors import UiError
from ui.timing import Timing, format_timing, timing_legend

MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 1.0
CHARS_PER_S_OF_INTERVAL = 4000


def update_interval_s(shown_chars: int) -> float:
    """Seconds between UI updates for an answer of ``shown_chars`` characters: 50 ms, growing to 1 s at 4000.

    The browser re-renders the whole message on each update, so a fixed rate costs O(length^2) overall; an
    interval that grows with the length keeps long answers from freezing the page.
    """
    return min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, shown_chars / CHARS_PER_S_OF_INTERVAL))


class TokenCoalescer:
    """Forwards the first piece at once, then joined updates spaced by :func:`update_interval_s` (or a fixed one).

    ``text`` holds everything pushed so far, flushed or not.
    """

    def __init__(
        self,
        emit: Callable[[str], Awaitable[object]],
        interval_s: Callable[[int], float] = update_interval_s,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._emit = emit
        self._interval_s = interval_s
        self._clock = clock
        self._pending = ""
        self._last_emit_s: float | None = None
        self.text = ""

    async def push(self, piece: str) -> None:
        """Add ``piece``; emits the pending text when the interval since the last update has passed."""
        if not piece:
            return
        self.text += piece
        self._pending += piece
        now = self._clock()
        if self._last_emit_s is None or now - self._last_emit_s >= self._interval_s(len(self.text)):
            await self.flush()

    async def flush(self) -> None:
        """Emit whatever is pending (nothing when empty)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, ""
        self._last_emit_s = self._clock()
        await self._emit(pending)


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
