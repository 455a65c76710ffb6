"""vLLM's output on its way to the log: every configured secret masked, and (containers) written to a rotated file.

The launcher runs vLLM as its child with stdout and stderr on a pipe and copies what comes through
:func:`pump` to its own stdout (supervisord's ``vllm.log``, or the container's log) and, with VLLM_LOG_TO_FILE, to
``logs/vllm.log`` rotated at VLLM_LOG_MAX_MB (:class:`core.logrotate.RotatingWriter`). Pieces are cut at line ends
(``\\n`` and the ``\\r`` of progress bars), so a secret is never split across two writes and masked in neither.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import BinaryIO

from core.logrotate import MIB, RotatingWriter
from core.redact import Redactor, secret_values
from core.settings import Settings

READ_BYTES = 64 * 1024
MAX_PENDING_BYTES = 1 << 20
"""A piece without any line end is written once it is this long (a runaway line must not grow without bound)."""

Sink = Callable[[bytes], None]


def stream_sink(stream: BinaryIO) -> Sink:
    """A sink writing to ``stream`` and flushing (so supervisord or the container runtime sees lines at once); a
    closed or broken stream is ignored, never the end of the copy."""

    def write(data: bytes) -> None:
        try:
            stream.write(data)
            stream.flush()
        except (OSError, ValueError):
            pass

    return write


def file_sink(writer: RotatingWriter) -> Sink:
    """A sink appending to a rotated log file; a failed write is reported once on stderr and the copy goes on."""
    failed = False

    def write(data: bytes) -> None:
        nonlocal failed
        try:
            writer.write(data)
        except OSError as exc:
            if not failed:
                failed = True
                print(f"[WARN] cannot write {writer.path}: {exc}", file=sys.stderr, flush=True)

    return write


class Masked:
    """Writes text to every sink with the secrets masked (the launcher's own lines go through it too)."""

    def __init__(self, sinks: Sequence[Sink], redactor: Redactor) -> None:
        self.sinks = list(sinks)
        self.redactor = redactor

    def write(self, data: bytes) -> None:
        """Mask ``data`` (whole lines) and hand it to every sink."""
        masked = self.redactor.bytes(data)
        for sink in self.sinks:
            sink(masked)

    def line(self, text: str) -> None:
        """Write one line of text (a newline is added)."""
        self.write(text.encode("utf-8", "replace") + b"\n")


def line_cut(data: bytes) -> int:
    """Bytes of ``data`` up to and including its last line end (``\\n`` or ``\\r``); 0 when it has none."""
    return max(data.rfind(b"\n"), data.rfind(b"\r")) + 1


def pump(fd: int, out: Masked) -> int:
    """Copy everything readable from ``fd`` to ``out`` until end of file, whole lines at a time; returns the bytes
    copied. A last piece without a line end is written at the end; a piece of :data:`MAX_PENDING_BYTES` without one
    is written as it is."""
    pending = b""
    copied = 0
    while True:
        try:
            data = os.read(fd, READ_BYTES)
        except InterruptedError:
            continue
        except OSError:
            break
        if not data:
            break
        copied += len(data)
        pending += data
        cut = line_cut(pending)
        if cut == 0 and len(pending) >= MAX_PENDING_BYTES:
            cut = len(pending)
        if cut:
            out.write(pending[:cut])
            pending = pending[cut:]
    if pending:
        out.write(pending)
    return copied


def output(settings: Settings) -> tuple[Masked, RotatingWriter | None]:
    """Where the launcher and vLLM write: stdout, and ``logs/vllm.log`` (rotated) with VLLM_LOG_TO_FILE (stdout only,
    with a warning, when ``logs/`` cannot be written: a checkout owned by another uid); every configured secret
    masked."""
    redactor = Redactor(secret_values(settings))
    writer = None
    sinks = [stream_sink(sys.stdout.buffer)]
    if settings.vllm_log_to_file:
        try:
            size = int(settings.vllm_log_max_mb * MIB)
            writer = RotatingWriter(settings.vllm_log_file, size, settings.vllm_log_backups)
            sinks.append(file_sink(writer))
        except OSError as exc:
            print(f"[WARNING] {settings.vllm_log_file} cannot be written ({exc.strerror}): logging to stdout only; "
                  f"make it writable by uid {os.getuid()} (make doctor)", file=sys.stderr, flush=True)
    return Masked(sinks, redactor), writer
