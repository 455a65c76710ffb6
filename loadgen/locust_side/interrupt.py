"""SIGINT cancels at once: the benchmark stops a run early (Ctrl-C, SIGTERM, server down, watchdog) with SIGINT to
Locust's process group, and instead of draining for ``--stop-timeout`` the requests in flight are cancelled and saved
naming :data:`CANCEL_CAUSE`. A ``--run-time`` end sends no signal and keeps its drain (DRAIN_S)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

CANCEL_CAUSE = "the run being stopped early (SIGINT: Ctrl-C, SIGTERM, server down or watchdog)"


def cancel_on_sigint(environment: Any, on_cancel: Callable[[], None] = lambda: None) -> None:
    """Install (in the main thread) a SIGINT handler: ``environment.stop_timeout`` becomes 0, ``on_cancel()`` runs,
    then the previous handler (KeyboardInterrupt also where SIGINT was ignored: only the benchmark sends it)."""

    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: FrameType | None) -> None:
        environment.stop_timeout = 0.0
        on_cancel()
        if callable(previous):
            previous(signum, frame)
        else:  # SIG_IGN inherited from a benchmark run as a background job: the benchmark's stop still stops
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
