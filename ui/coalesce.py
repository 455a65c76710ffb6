"""Groups streamed tokens into fewer UI updates, so fast models do not flood the browser with one event per token."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

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
