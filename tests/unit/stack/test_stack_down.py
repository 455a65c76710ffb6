"""`make down` while supervisord is still stopping (an earlier `make down`, or an interrupted `make up` stopping what
it started): it waits for it to end instead of saying "not running" while the stack's processes still run (once a
test session ended with a stack's Locust still alive)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from core.settings import Settings
from stack import control


def test_down_waits_for_a_supervisord_that_is_stopping(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No socket answers, but the pid file names a live process (a supervisord stopping its programs, here a
    `sleep 2`): `make down` waits until it has ended, then says the stack stopped."""
    settings = Settings(_env_file=None, run_dir=tmp_path / "run", logs_dir=tmp_path / "logs")  # type: ignore[call-arg]
    settings.run_dir.mkdir()
    stopping = subprocess.Popen(["sleep", "2"])
    (settings.run_dir / "supervisord.pid").write_text(f"{stopping.pid}\n")
    begun = time.monotonic()
    try:
        code = control.down(settings)
        waited_s = time.monotonic() - begun
        assert stopping.poll() is not None, "make down returned while supervisord was still stopping"
    finally:
        stopping.kill()
        stopping.wait()
    out = capsys.readouterr().out
    assert code == 0 and "The stack is stopping already; waiting for it." in out and "Stack stopped." in out, out
    assert waited_s >= 1.0


def test_down_with_a_stale_pid_file_says_not_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A pid file whose process has ended (supervisord killed): not running, at once."""
    settings = Settings(_env_file=None, run_dir=tmp_path / "run", logs_dir=tmp_path / "logs")  # type: ignore[call-arg]
    settings.run_dir.mkdir()
    ended = subprocess.Popen(["true"])
    ended.wait()
    (settings.run_dir / "supervisord.pid").write_text(str(ended.pid))
    assert control.down(settings) == 0
    assert "The stack is not running." in capsys.readouterr().out
