"""supervisord that does not answer in time (a loaded host) is told apart from no supervisord: the XML-RPC call
times out into :class:`engine.local_control.SupervisorNotAnswering`, and `make status` says so with its own exit code."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.settings import Settings
from engine.local_control import Supervisor, SupervisorNotAnswering, engine_phase, known_states
from stack import control as stackctl


@pytest.fixture
def silent_supervisord(tmp_path: Path) -> Iterator[Path]:
    """A unix socket at RUN_DIR/supervisor.sock that accepts connections and never answers (a busy supervisord)."""
    run_dir = Path("/tmp") / f"sv-{id(tmp_path)}"  # unix socket paths are short (108 bytes)
    run_dir.mkdir(exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(run_dir / "supervisor.sock"))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield run_dir
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()
        (run_dir / "supervisor.sock").unlink(missing_ok=True)
        run_dir.rmdir()


def test_a_timeout_is_not_answering_not_absent(silent_supervisord: Path) -> None:
    started = time.monotonic()
    with pytest.raises(SupervisorNotAnswering, match=r"supervisord not answering \(timeout after 0.5 s"):
        Supervisor(silent_supervisord, timeout_s=0.5).states()
    assert time.monotonic() - started < 5
    assert known_states(Supervisor(silent_supervisord, timeout_s=0.2)) == {}  # waits go on, states unknown


def test_no_socket_is_not_running(tmp_path: Path) -> None:
    assert Supervisor(tmp_path, timeout_s=0.5).states() is None


def test_make_status_says_not_answering_with_exit_4(
    silent_supervisord: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(stackctl, "process_states", lambda s: Supervisor(s.run_dir, timeout_s=0.3).states())
    settings = Settings(_env_file=None, run_dir=silent_supervisord)  # type: ignore[call-arg]
    assert stackctl.status(settings) == stackctl.EXIT_NOT_ANSWERING == 4
    out = capsys.readouterr().out
    assert "supervisord not answering (timeout" in out and "not running" not in out


def test_make_status_without_supervisord_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(_env_file=None, run_dir=tmp_path / "run")  # type: ignore[call-arg]
    assert stackctl.status(settings) == stackctl.EXIT_NOT_RUNNING == 3
    assert "The stack is not running" in capsys.readouterr().out


def test_the_start_up_phase_reads_the_log_alone_when_supervisord_is_busy(
    silent_supervisord: Path, tmp_path: Path
) -> None:
    settings = Settings(_env_file=None, run_dir=silent_supervisord, logs_dir=tmp_path)  # type: ignore[call-arg]
    assert engine_phase(settings, supervisor=Supervisor(silent_supervisord, timeout_s=0.2)).phase


def test_only_reading_the_states_has_the_timeout(tmp_path: Path) -> None:
    """A control call (``stopProcess`` waits for vLLM to stop) keeps waiting as long as it takes."""
    supervisor = Supervisor(tmp_path, timeout_s=0.5)
    assert supervisor.proxy()._ServerProxy__transport._get_connection().timeout is None
    assert supervisor.proxy(0.5)._ServerProxy__transport._get_connection().timeout == 0.5
