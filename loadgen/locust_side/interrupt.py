"""SIGINT cancels at once: the benchmark stops a run early (Ctrl-C, SIGTERM, SIGHUP, the server-down breaker, the
watchdog) with SIGINT to Locust's process group. Locust's own shutdown would let the users finish their requests for
``--stop-timeout`` seconds (the DRAIN_S of a closed-loop ``--duration`` run, meant for its planned end); this handler
sets the stop timeout to 0 first, so the requests in flight are cancelled promptly and saved as cancelled rows naming
:data:`CANCEL_CAUSE`. The planned end of a ``--duration`` run (``--run-time``) sends no signal and keeps its drain."""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

CANCEL_CAUSE = "the run being stopped early (SIGINT: Ctrl-C, SIGTERM, server down or watchdog)"


def cancel_on_sigint(environment: Any, on_cancel: Callable[[], None] = lambda: None) -> None:
    """Install a SIGINT handler in this Locust process: ``environment.stop_timeout`` becomes 0 (no drain),
    ``on_cancel()`` runs (the locustfile marks the rows' cause), then the handler that was there before runs
    (Python's default raises KeyboardInterrupt: Locust shuts down as before); where SIGINT was ignored (inherited by
    a benchmark started as a background job) KeyboardInterrupt is raised all the same: only the benchmark sends
    SIGINT to Locust's own session, and it means stop. Must be called in the main thread."""
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: FrameType | None) -> None:
        environment.stop_timeout = 0.0
        on_cancel()
        if callable(previous):
            previous(signum, frame)
        else:  # SIG_IGN inherited from a benchmark run as a background job: the benchmark's stop still stops
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
