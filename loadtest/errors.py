"""The load generator's one error type for runs that cannot start or finish."""

from __future__ import annotations


class BenchError(RuntimeError):
    """A benchmark cannot start or finish; the message says what to do."""
