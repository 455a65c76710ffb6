"""Size-based rotation of the stack's own logs: ``name`` -> ``name.1`` -> ... -> ``name.N``.

:class:`RotatingWriter` keeps one appender open (``logs/vllm.log``, a Locust process's ``logs/requests.jsonl``);
:func:`append_rotating` is one write of it (the UI's request lines). Many processes may append: each line is one
``O_APPEND`` write, rotation happens under an exclusive ``flock``, rechecking the size.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


def lock_path(path: Path) -> Path:
    """The hidden lock file of ``path`` (``logs/.requests.jsonl.lock``): not part of the rotated family."""
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def rotation_lock(path: Path) -> Iterator[None]:
    """Hold the exclusive rotation lock of ``path`` (blocking; released on exit, also when the process dies)."""
    fd = os.open(lock_path(path), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def rotate(path: Path, backups: int) -> None:
    """Shift ``path.{n}`` to ``path.{n+1}`` (dropping ``path.{backups}``) and ``path`` to ``path.1``."""
    for n in range(backups - 1, 0, -1):
        older = path.with_name(f"{path.name}.{n}")
        if older.exists():
            os.replace(older, path.with_name(f"{path.name}.{n + 1}"))
    if path.exists():
        os.replace(path, path.with_name(f"{path.name}.1"))


def append_rotating(path: Path, data: bytes, max_bytes: int | None, backups: int) -> None:
    """Append whole lines to ``path`` in one ``O_APPEND`` write, rotating first past ``max_bytes`` (a
    :class:`RotatingWriter` for one write).

    Raises:
        OSError: the folder or file cannot be written.
    """
    with contextlib.closing(RotatingWriter(path, max_bytes, backups)) as writer:
        writer.write(data)


class RotatingWriter:
    """An appender kept open, rotated at ``max_bytes`` (None: never) keeping ``backups``: the size is rechecked under
    the exclusive rotation lock, so several writers (processes) rotate once, and each reopens the new file."""

    def __init__(self, path: Path, max_bytes: int | None, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, data: bytes) -> None:
        """Append ``data``, rotating first when the file would pass ``max_bytes``.

        Raises:
            OSError: the file cannot be written.
        """
        size = os.fstat(self._fd).st_size
        if self.max_bytes is not None and size > 0 and size + len(data) > self.max_bytes:
            with rotation_lock(self.path):
                try:
                    current = os.stat(self.path).st_size
                except FileNotFoundError:
                    current = 0
                if current > 0 and current + len(data) > self.max_bytes:  # nobody else rotated it meanwhile
                    rotate(self.path, self.backups)
                os.close(self._fd)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(self._fd, data)

    def close(self) -> None:
        """Close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
