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

import psutil

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


def _gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (no such process, or a zombie waiting for its parent)."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return True


def engine_processes(run_dir: Path, pgid: int | None = None) -> list[int]:
    """Pids of live processes carrying this stack's :data:`MARKER` or (with ``pgid``, from
    ``engine_state.json``) in the engine's process group, if Python or vLLM by their command line (a guard against a
    reused group number; renamed processes may lose the environment ``/proc`` shows). Never this process or its
    group; unreadable ones are skipped."""
    wanted = marker_value(run_dir)
    if pgid is not None and pgid in (os.getpgrp(), 0, 1):
        pgid = None
    found = []
    for proc in psutil.process_iter():
        try:
            ours = proc.environ().get(MARKER) == wanted or (
                pgid is not None
                and os.getpgid(proc.pid) == pgid
                and any(word in " ".join(proc.cmdline()).lower() for word in ("python", "vllm"))
            )
        except (psutil.Error, OSError):
            continue
        if ours and proc.pid != os.getpid() and not _gone(proc.pid):
            found.append(proc.pid)
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
