"""`make status`'s start-up line: the cold start and the latest warm restarts from vLLM's log."""

from __future__ import annotations

from core.report_schema import StartupFacts
from stack.control import startup_times_line


def test_cold_and_warm_starts_are_listed() -> None:
    """The first start in the log is the cold one; up to five latest restarts follow."""
    facts = StartupFacts(phase="ready", detail="d", cold_start_s=152.4, warm_starts_s=[99.0, 80.2, 69.0])
    assert startup_times_line(facts) == "  starts: cold 152 s, warm 99 s / 80 s / 69 s"


def test_no_restart_yet_and_no_start() -> None:
    """One start so far says so; no finished start prints nothing."""
    assert startup_times_line(StartupFacts(phase="ready", detail="d", cold_start_s=51.0)) == (
        "  starts: cold 51 s, no warm restart yet"
    )
    assert startup_times_line(StartupFacts(phase="compiling", detail="d")) is None
    assert startup_times_line(None) is None
