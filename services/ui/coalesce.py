"""Groups streamed tokens into fewer UI updates, so fast models do not flood the browser with one event per token."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

DEFAULT_INTERVAL_S = 0.05


class TokenCoalescer:
    """Forwards the first piece at once, then at most one joined update per ``interval_s`` seconds.

    ``text`` holds everything pushed so far, flushed or not.
    """

    def __init__(
        self,
        emit: Callable[[str], Awaitable[object]],
        interval_s: float = DEFAULT_INTERVAL_S,
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
        if self._last_emit_s is None or now - self._last_emit_s >= self._interval_s:
            await self.flush()

    async def flush(self) -> None:
        """Emit whatever is pending (nothing when empty)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, ""
        self._last_emit_s = self._clock()
        await self._emit(pending)
