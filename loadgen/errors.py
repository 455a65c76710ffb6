"""The load generator's one error type for runs that cannot start or finish."""

from __future__ import annotations


class BenchError(RuntimeError):
    """A benchmark cannot start or finish; the message says what to do."""


class WarmupFailed(BenchError):
    """Every warmup request failed (the message counts the server's reasons): the measured run is not started."""


class WarmupInterrupted(BenchError):
    """Ctrl-C (SIGTERM, SIGHUP) during the warmup: its requests aborted, its rows saved, no measured run."""


class WorkersMissing(BenchError):
    """EXPECT_WORKERS: not every load worker joined in time; nothing was measured."""


class OverCapacity(BenchError):
    """The warm-up shows the engine cannot answer the planned load within REQUEST_TIMEOUT_S; the load is not sent."""
