"""vLLM's start-up phase judged together with its process, and the one failure report of a launch.

The log alone cannot tell a start still compiling from one whose process died (a typo in VLLM_EXTRA_ARGS, a hard
crash), nor a ready server from one killed since: :func:`judge` corrects it with what the state file and supervisord
know of the process (:func:`engine_process`). :func:`launch_phase` reads only one launch's lines, so ``make up`` and
``./start_vllm.sh`` never report the previous run; :func:`failure_report` is what both print when vLLM did not come up.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.enginestate import EngineState, LogPosition, pid_running
from core.logfiles import ReadStats, iter_spans, rotated_family
from engine.vllmlog import grammar as fmt
from engine.vllmlog.startup import FULL_READ_BYTES, TAIL_BYTES, read_startup
from engine.vllmlog.tracker import StartupPhase, StartupTracker

DEAD_STATES = frozenset({"EXITED", "FATAL", "BACKOFF", "STOPPED"})
"""supervisord's states of a program whose process is gone."""
TAIL_LINES = 15
"""Log lines a failure report shows."""


@dataclass(frozen=True)
class EngineProcess:
    """What is known of vLLM's process: ``running`` None when nothing can tell; ``exit_code`` as a shell shows it."""

    running: bool | None
    exit_code: int | None = None
    stopped_on_purpose: bool = False
    """supervisord's STOPPED: someone stopped it (``make down``, a restart), it did not fail."""

    def describe(self) -> str:
        """``exited with code 2``, ``was stopped``, or ``ended`` (exit status not known yet)."""
        if self.stopped_on_purpose:
            return "was stopped"
        return f"exited with code {self.exit_code}" if self.exit_code is not None else "ended"


def engine_process(state: EngineState | None, supervisor_info: Mapping[str, Any] | None = None) -> EngineProcess:
    """vLLM's process from the state file and supervisord's ``getProcessInfo`` (either may be None):
    the launcher's recorded exit status wins, then supervisord's state, then whether the recorded pid still runs."""
    statename = (supervisor_info or {}).get("statename")
    relaunched = statename in ("RUNNING", "STARTING") and (
        state is None or (supervisor_info or {}).get("start", 0) > (state.started_at or 0)
    )  # a new launcher runs that has not recorded its launch yet
    if state is not None and state.exit_code is not None and not relaunched:
        return EngineProcess(False, state.exit_code)
    if statename in DEAD_STATES:
        code = (supervisor_info or {}).get("exitstatus")
        return EngineProcess(False, code if isinstance(code, int) else None, statename == "STOPPED")
    running = pid_running(state) if state is not None and not relaunched else None
    if running is False:  # vLLM is gone while its launcher still copies the last output (up to 5 s)
        return EngineProcess(False)
    if statename in ("RUNNING", "STARTING"):
        return EngineProcess(True)
    return EngineProcess(running)


def judge(phase: StartupPhase, process: EngineProcess) -> StartupPhase:
    """``phase`` (from the log) corrected by ``process``: a start whose process is gone before ready is
    ``failed`` (the log's error line, else the exit), a ready one ``stopped``; otherwise unchanged."""
    if process.running is not False or phase.phase in ("failed", "stopped", "not_started"):
        return phase
    attempts = phase.attempts
    if phase.phase == "ready":
        if attempts:
            attempts = (*attempts[:-1], replace(attempts[-1], outcome="stopped"))
        how = (
            "stopped after being ready"
            if process.stopped_on_purpose
            else "died after being ready" + (f" ({process.describe()})" if process.exit_code is not None else "")
        )
        return replace(phase, phase="stopped", detail=how, attempts=attempts)
    if attempts:
        attempts = (*attempts[:-1], replace(attempts[-1], outcome="failed"))
    if phase.error_line:
        detail = f"failed: {phase.error_line}" + (f" (in {phase.error_process})" if phase.error_process else "")
    else:
        detail = f"failed: vLLM {process.describe()} before it was ready (no error line in its log)"
    return replace(phase, phase="failed", detail=detail, attempts=attempts)


def _launch_spans(path: Path, since: LogPosition | None) -> list[tuple[str, int]]:
    """``(file, from byte)`` holding the lines after ``since``: its file (by device and inode) from the
    offset, then every newer one; the current file's tail when it is gone or ``since`` is None."""
    family = rotated_family(path)
    for index, member in enumerate(family):
        try:
            st = os.stat(member)
        except OSError:
            continue
        if since and (st.st_dev, st.st_ino) == (since.dev, since.ino) and since.offset <= st.st_size:
            return [(member, since.offset), *((newer, 0) for newer in family[index + 1 :])]
    try:
        size = os.stat(path).st_size
    except OSError:
        return []
    return [(str(path), max(0, size - TAIL_BYTES))]


def launch_lines(path: Path, since: LogPosition | None, limit_bytes: int = FULL_READ_BYTES) -> list[bytes]:
    """The log's lines after ``since`` (None: the current file's tail), colours removed, the newest ``limit_bytes``
    or so."""
    lines: deque[bytes] = deque()
    kept = 0
    for member, begin in _launch_spans(path, since):
        for span in iter_spans(member, ReadStats(), start_at=begin or None):
            buf, start, stop = fmt.clean_span(*span)
            chunk = buf[start:stop].split(b"\n")
            chunk.pop()
            lines.extend(chunk)
            kept += stop - start
            while kept > limit_bytes and lines:
                kept -= len(lines.popleft()) + 1
    return list(lines)


def launch_phase(
    path: Path, state: EngineState | None, since: LogPosition | None = None, process: EngineProcess | None = None
) -> StartupPhase:
    """The start-up phase judged with the process (:func:`judge`; ``process`` defaults to the state
    file's): with ``since`` only that launch (``not_started`` until its first line), else the log's latest start."""
    if since is None:
        phase = read_startup(path, state)
    else:
        tracker = StartupTracker()
        for raw in launch_lines(path, since):
            tracker.feed(raw)
        phase = tracker.result()
        if phase.phase == "not_started":
            return phase  # the launch wrote nothing yet: its process (and the state file) may still be the last one's
    return judge(phase, process if process is not None else engine_process(state))


def failure_report(path: Path, phase: StartupPhase, since: LogPosition | None, tail_lines: int = TAIL_LINES) -> str:
    """Why a launch did not come up: the failed phase's error line and its last ``tail_lines`` lines."""
    why = f"vLLM {phase.detail}" if phase.phase != "not_started" else "vLLM exited before it wrote a start-up line"
    if phase.error_line and phase.error_line not in why:
        why += f"\n  error: {phase.error_line}"
    tail = [fmt.text(raw, 300) for raw in launch_lines(path, since, 1 << 20)[-tail_lines:]]
    shown = "\n".join(f"  | {line}" for line in tail) if tail else "  (no lines)"
    return f"{why}\nLast lines of {path}:\n{shown}"
