"""Sampling windows opened and closed over HTTP (``POST /windows/start``, ``POST /windows/{id}/stop``): a client
brackets its load with them and gets the window's peaks back."""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from core.api import WindowResult, WindowStarted
from core.report_schema import Resources

WINDOW_ID_RE = re.compile(r"[0-9a-f]{16}")  # matched whole
MAX_WINDOWS = 256  # oldest windows are forgotten beyond this


@dataclass
class _Window:
    started_at: float
    result: WindowResult | None = None


class UnknownWindow(KeyError):
    """No window has this id (never started, malformed, or forgotten)."""


class WindowRegistry:
    """Open windows by id; stopping one summarises it with ``summarise(start, end)`` (idempotent)."""

    def __init__(
        self,
        summarise: Callable[[float, float], Resources],
        clock: Callable[[], float] = time.time,
        on_start: Callable[[], object] | None = None,
    ) -> None:
        self._summarise = summarise
        self._on_start = on_start
        self._clock = clock
        self._windows: OrderedDict[str, _Window] = OrderedDict()
        self._lock = threading.Lock()

    def start(self) -> WindowStarted:
        """Open a window now (``on_start`` runs first: the sidecar takes a sample, so the window starts with one)."""
        window_id = secrets.token_hex(8)
        if self._on_start is not None:
            self._on_start()
        now = self._clock()
        with self._lock:
            self._windows[window_id] = _Window(started_at=now)
            while len(self._windows) > MAX_WINDOWS:
                self._windows.popitem(last=False)
        return WindowStarted(window_id=window_id, started_at=now)

    def stop(self, window_id: str, end: float | None = None) -> WindowResult:
        """Close ``window_id`` now (or at an earlier ``end``) and summarise it; a second stop returns the first result.
        Raises UnknownWindow: malformed or unknown id."""
        if not WINDOW_ID_RE.fullmatch(window_id):
            raise UnknownWindow(window_id)
        with self._lock:
            window = self._windows.get(window_id)
            if window is None:
                raise UnknownWindow(window_id)
            if window.result is not None:
                return window.result
            now = self._clock()
            start, end = window.started_at, now if end is None else max(window.started_at, min(end, now))
            window.result = WindowResult(
                window_id=window_id,
                started_at=start,
                ended_at=end,
                duration_s=end - start,
                resources=self._summarise(start, end),
            )
            return window.result
