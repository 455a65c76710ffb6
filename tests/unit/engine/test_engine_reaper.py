"""``make down`` ends what a crashed vLLM left under PID 1 (a SIGTERM-ignoring ``resource_tracker``), by this
stack's marker only: real processes, re-parented, one of another stack's that must survive."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.settings import Settings
from engine.launcher import vllm_env
from engine.reaper import MARKER, end_engine_processes, engine_processes, marker_value
from stack import control as stackctl

ORPHAN = r"""
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as multiprocessing's resource_tracker does
signal.signal(signal.SIGINT, signal.SIG_IGN)
if os.fork():
    os._exit(0)  # the parent exits: the grandchild is re-parented (to PID 1 or a subreaper)
sys.stdout.write(f"{os.getpid()}\n")
sys.stdout.flush()
devnull = os.open(os.devnull, os.O_RDWR)
os.dup2(devnull, 1)  # let go of the pipe: the test reads until it closes
os.dup2(devnull, 2)
time.sleep(600)
"""


def spawn_orphan(run_dir: Path) -> int:
    """A re-parented process ignoring SIGTERM with ``run_dir``'s marker in its environment; its pid."""
    env = {**os.environ, MARKER: marker_value(run_dir)}
    done = subprocess.run(
        [sys.executable, "-c", ORPHAN], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=60
    )
    return int(done.stdout.strip())


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_down_ends_this_stacks_orphans_only(tmp_path: Path) -> None:
    """An orphan that ignores SIGTERM is SIGKILLed after the grace period; another stack's orphan is not touched."""
    ours, theirs = tmp_path / "ours" / "run", tmp_path / "theirs" / "run"
    for folder in (ours, theirs):
        folder.mkdir(parents=True)
    mine, other = spawn_orphan(ours), spawn_orphan(theirs)
    try:
        assert os.getppid() != 0 and alive(mine) and alive(other)
        assert engine_processes(ours) == [mine]
        started = time.monotonic()
        ended = end_engine_processes(ours, grace_s=0.5)
        assert ended.found == [mine] and ended.killed == [mine] and ended.left == []
        assert time.monotonic() - started < 10
        assert not alive(mine) and alive(other)
    finally:
        for pid in (mine, other):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_make_down_without_supervisord_still_ends_leftovers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``make down`` after supervisord is gone (a hard crash) still ends the engine's leftovers; 0 when none is left."""
    settings = Settings(_env_file=None, run_dir=tmp_path / "run", logs_dir=tmp_path / "logs")  # type: ignore[call-arg]
    settings.run_dir.mkdir()
    pid = spawn_orphan(settings.run_dir)
    try:
        assert stackctl.down(settings) == 0
        assert not alive(pid)
        assert "Ended 1 leftover engine processes" in capsys.readouterr().out
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_launcher_marks_vllm_with_the_stacks_run_dir(tmp_path: Path) -> None:
    """vLLM's environment carries the marker (inherited by every process it starts)."""
    settings = Settings(_env_file=None, run_dir=tmp_path / "run", logs_dir=tmp_path / "logs")  # type: ignore[call-arg]
    assert vllm_env(settings, "cpu", base={})[MARKER] == str((tmp_path / "run").resolve())


def spawn_renamed_orphan_in_own_group() -> tuple[int, int]:
    """A re-parented, SIGTERM-ignoring process in a process group of its own whose environment has no marker (as a
    vLLM engine core whose setproctitle overwrote what ``/proc/<pid>/environ`` shows); (its pid, its group)."""
    env = {k: v for k, v in os.environ.items() if k != MARKER}
    done = subprocess.run(
        [sys.executable, "-c", ORPHAN], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        timeout=60, start_new_session=True,
    )  # fmt: skip
    pid = int(done.stdout.strip())
    return pid, os.getpgid(pid)


def test_engine_group_finds_renamed_orphans_and_never_this_group(tmp_path: Path) -> None:
    """With the engine's process group (``engine_state.json`` ``pgid``) a leftover without the marker is found and
    ended; the caller's own group is never taken for the engine's, and without a group only the marker counts."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    pid, pgid = spawn_renamed_orphan_in_own_group()
    try:
        assert pgid != os.getpgrp() and engine_processes(run_dir) == []
        assert engine_processes(run_dir, pgid=os.getpgrp()) == []  # never our own group (pytest, make)
        assert engine_processes(run_dir, pgid=pgid) == [pid]
        ended = end_engine_processes(run_dir, grace_s=0.5, pgid=pgid)
        assert ended.found == [pid] and ended.killed == [pid] and not alive(pid)
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_launcher_records_its_process_group(tmp_path: Path) -> None:
    """The state the launcher writes carries the group vLLM is started in (the launcher's own)."""
    from core.enginestate import read_engine_state
    from engine import launcher as launch
    from engine.model_resolve import ResolvedModel

    settings = Settings(_env_file=None, logs_dir=tmp_path / "logs", run_dir=tmp_path / "run")  # type: ignore[call-arg]
    resolved = ResolvedModel(requested="m", source="local", model_arg="/m", served_name="m", synthetic=False)
    launch.write_state(settings, resolved, ["vllm"], profiler=False, pid=os.getpid())
    state = read_engine_state(settings.engine_state_file)
    assert state is not None and state.pgid == os.getpgrp()


def test_a_restart_ends_what_a_crashed_vllm_left_before_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM's API server SIGKILLed: its engine core lives on, re-parented, holding memory. ``./start_vllm.sh`` (a
    restart) ends it once every local engine is stopped, before the new one starts (it lived until `make down`)."""
    from core.enginestate import EngineRequest
    from engine import local_control as control
    from tests.unit.engine.test_engine_control import FakeSupervisor

    settings = Settings(_env_file=None, run_dir=tmp_path / "run", logs_dir=tmp_path / "logs")  # type: ignore[call-arg]
    settings.run_dir.mkdir(parents=True)
    monkeypatch.setattr(control, "wait_for_http", lambda url, timeout_s, abort, headers: (True, ""))
    monkeypatch.setattr(control, "end_engine_processes", lambda run_dir: end_engine_processes(run_dir, grace_s=0.5))
    monkeypatch.setattr(control, "SETTLE_S", 0.5)
    orphan = spawn_orphan(settings.run_dir)
    try:
        supervisor = FakeSupervisor(state="EXITED")
        control.LocalEngine(settings, supervisor).restart(EngineRequest())  # type: ignore[arg-type]
        assert not alive(orphan) and supervisor.calls == ["start vllm"]
        assert f"Ended 1 process(es) an earlier vLLM left behind ({orphan})" in capsys.readouterr().out
    finally:
        if alive(orphan):
            os.kill(orphan, signal.SIGKILL)
