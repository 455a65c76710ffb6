"""Find and end every process of one stack's engine, including those a crashed vLLM left behind.

A crashed vLLM's children (``resource_tracker``, which ignores SIGTERM, workers, engine cores) are re-parented to
PID 1 and may have left supervisord's process group. Each carries the marker the launcher puts in vLLM's environment
(:data:`MARKER`, this stack's run directory), read from ``/proc/<pid>/environ``: other checkouts' stacks are never
touched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

MARKER = "STACK_ENGINE_RUN_DIR"
"""Environment variable the launcher sets for vLLM: the resolved run directory of the stack that started it."""
GRACE_S = 10.0
"""Seconds between SIGTERM and SIGKILL."""


def marker_value(run_dir: Path) -> str:
    """The :data:`MARKER` value of the stack whose run directory is ``run_dir``."""
    return str(run_dir.resolve())


@dataclass
class Ended:
    """What :func:`end_engine_processes` did: pids found, those that needed SIGKILL, those still there after it."""

    found: list[int] = field(default_factory=list)
    killed: list[int] = field(default_factory=list)
    left: list[int] = field(default_factory=list)


def _stat(proc_dir: str) -> list[str] | None:
    """The fields of ``<proc_dir>/stat`` after the command name (state, parent, group, …); None if unreadable."""
    try:
        return Path(proc_dir, "stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None


def _gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (no such process, or a zombie waiting for its parent)."""
    stat = _stat(f"/proc/{pid}")
    return stat is None or stat[:1] in (["Z"], ["X"])


def _looks_like_engine(proc_dir: str) -> bool:
    """A Python process or one vLLM renamed: a guard against a reused process group number."""
    try:
        cmdline = Path(proc_dir, "cmdline").read_bytes().lower()
    except OSError:
        return False
    return b"python" in cmdline or b"vllm" in cmdline


def engine_processes(run_dir: Path, pgid: int | None = None, proc: Path = Path("/proc")) -> list[int]:
    """Pids of live processes carrying this stack's :data:`MARKER` or (with ``pgid``, from
    ``engine_state.json``) in the engine's process group (renamed processes may lose the environment ``/proc`` shows).
    Never this process or its group; unreadable ones are skipped; without ``/proc`` none."""
    wanted = f"{MARKER}={marker_value(run_dir)}".encode()
    own = os.getpid()
    if pgid is not None and pgid in (os.getpgrp(), 0, 1):
        pgid = None
    found = []
    try:
        entries = list(os.scandir(proc))
    except OSError:
        return []
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
        except OSError:
            continue
        ours = wanted in environ.split(b"\0") or (
            pgid is not None and (_stat(entry.path) or [])[2:3] == [str(pgid)] and _looks_like_engine(entry.path)
        )
        if ours and not _gone(int(entry.name)):
            found.append(int(entry.name))
    return sorted(found)


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    left = [pid for pid in pids if not _gone(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [pid for pid in left if not _gone(pid)]
    return left


def end_engine_processes(run_dir: Path, grace_s: float = GRACE_S, pgid: int | None = None) -> Ended:
    """SIGTERM every engine process of the stack at ``run_dir``, SIGKILL those left after ``grace_s`` s; never raises.
    ``left``: any that survived SIGKILL for 5 s."""
    ended = Ended(found=engine_processes(run_dir, pgid))
    if not ended.found:
        return ended
    _signal_all(ended.found, signal.SIGTERM)
    ended.killed = _wait_gone(ended.found, grace_s)
    _signal_all(ended.killed, signal.SIGKILL)
    ended.left = _wait_gone(ended.killed, 5.0)
    return ended
