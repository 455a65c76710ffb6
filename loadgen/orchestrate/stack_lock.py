"""One benchmark at a time per stack (two would measure each other's load): an ``fcntl.flock`` on
``RUN_DIR/benchmark.lock`` for a whole run or sweep, released however the holder ends; the file names the holder."""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

LOCK_NAME = "benchmark.lock"


class StackBusy(Exception):
    """Another benchmark holds the stack's lock; the message names it and what to do."""


class RunLock:
    """The stack's benchmark lock (``with RunLock(run_dir):``). Raises StackBusy: on entering, when another process
    holds it. OSError: the lock file cannot be made (RUN_DIR not writable)."""

    def __init__(self, run_dir: Path, fallback_dir: Path | None = None) -> None:
        self.path = run_dir / LOCK_NAME
        self.fallback = fallback_dir / LOCK_NAME if fallback_dir is not None else None
        self._fd: int | None = None

    def _open(self) -> int:
        """The lock file's descriptor: in RUN_DIR, else (read-only, as in the compose Locust container) in the
        fallback folder. Raises OSError: neither can be made."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            if self.fallback is None:
                raise
            self.path = self.fallback
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

    def __enter__(self) -> RunLock:
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", errors="replace").strip() or "unknown"
            os.close(fd)
            raise StackBusy(f"another benchmark is running against this stack ({holder}); wait for it to end, or stop "
                            "it (Ctrl-C in its terminal, or kill -TERM <its pid>: it writes the report of its requests "
                            f"so far), then run again. Lock: {self.path}") from None
        os.ftruncate(fd, 0)
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        os.pwrite(fd, f"pid {os.getpid()}, since {started}: {' '.join(sys.argv)[:300]}\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *_: object) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing releases the lock
            self._fd = None
