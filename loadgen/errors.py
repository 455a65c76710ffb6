"""The load generator's one error type for runs that cannot start or finish."""

from __future__ import annotations


class BenchError(RuntimeError):
    """A benchmark cannot start or finish; the message says what to do."""


class WarmupFailed(BenchError):
    """Every warmup request failed: the measured run is not started (it would fail the same way); the message
    carries the server's own reasons, counted."""


class WarmupInterrupted(BenchError):
    """Ctrl-C (SIGTERM, SIGHUP) during the warmup: its requests in flight were aborted, its rows saved; the measured
    run is not started."""


class WorkersMissing(BenchError):
    """EXPECT_WORKERS: not every load worker joined in time; nothing was measured (the message says how to start
    one)."""


class OverCapacity(BenchError):
    """The warm-up shows the engine cannot answer the planned load within REQUEST_TIMEOUT_S
    (:mod:`loadgen.orchestrate.capacity`): the load is not sent; the message names the load it can serve."""
