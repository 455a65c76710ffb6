"""A closed standard output is the reader's choice, not a crash: ``make status | head -1`` ends quietly."""

from __future__ import annotations

import contextlib
import io
import os
import sys

TYPE_CHECKING = False  # typing is not imported at run time: the log analyzer's start-up time counts
if TYPE_CHECKING:
    from typing import Any, TextIO


class PipeSafeStdout:
    """A text stream whose first ``BrokenPipeError`` points it at ``/dev/null``; later writes are dropped."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.reader_gone = False

    def _drop(self) -> None:
        """The reader closed the pipe: send what is left (buffered bytes included) to /dev/null."""
        self.reader_gone = True
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):  # a StringIO has no descriptor
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def write(self, text: str) -> int:
        """Write ``text``; after the reader left, pretend to (returns its length, never raises BrokenPipeError)."""
        if not self.reader_gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        """Flush; a closed pipe is dropped quietly."""
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._drop()
            with contextlib.suppress(BrokenPipeError, OSError, ValueError):
                self._stream.flush()  # the buffer now drains into /dev/null

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer ...
        return getattr(self._stream, name)


def guard_stdout() -> PipeSafeStdout:
    """Make ``sys.stdout`` quiet about a reader that closed the pipe (idempotent); returns the wrapper."""
    if isinstance(sys.stdout, PipeSafeStdout):
        return sys.stdout
    wrapped = PipeSafeStdout(sys.stdout)
    sys.stdout = wrapped
    return wrapped
