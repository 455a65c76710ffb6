"""vLLM's output on its way to the log: every configured secret masked, uvicorn's lines time-stamped, and
(containers) written to a rotated file.

The launcher copies vLLM's stdout and stderr (:func:`pump`) to its own stdout and, with VLLM_LOG_TO_FILE, to
``logs/vllm.log`` (:class:`core.logrotate.RotatingWriter`), cut at line ends so a secret is never split across two
writes. vLLM's access log leaves out the stack's own polling (:func:`access_log_args`).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import BinaryIO

from core.logrotate import RotatingWriter
from core.redact import Redactor, secret_values
from core.settings import Settings
from core.units import MIB
from engine.gpupeak import has_flag
from engine.vllmlog.grammar import PREFIX

QUIET_ENDPOINTS = ("/metrics", "/health", "/v1/models", "/version", "/ping", "/load")
"""What the stack itself polls on vLLM: left out of the access log so that requests stay readable."""
ACCESS_LOG_FLAG = "--disable-access-log-for-endpoints"
"""vLLM's flag (>= 0.10) for the exact paths uvicorn's access log leaves out."""


def access_log_args(extra_args: str) -> list[str]:
    """``--disable-access-log-for-endpoints`` with :data:`QUIET_ENDPOINTS`, unless VLLM_EXTRA_ARGS sets it."""
    return [] if has_flag(extra_args, ACCESS_LOG_FLAG) else [ACCESS_LOG_FLAG, ",".join(QUIET_ENDPOINTS)]


UVICORN_LINE_RE = re.compile(
    rb"^" + PREFIX + rb"(DEBUG|INFO|WARNING|ERROR|CRITICAL):[ ]{1,8}(?=[^\d\s:\-])(?![^\r\n]{0,300} - \"[A-Z]+ )",
    re.MULTILINE,
)
"""A line of uvicorn's own (``INFO:     Application startup complete.``), prefixed or not (groups:
prefix, process, level); access lines (``INFO:     127.0.0.1:5 - "GET …``) are not matched."""
UVICORN_SOURCE = b"uvicorn"


def vllm_stamp(now_s: float) -> str:
    """vLLM's time stamp for ``now_s`` (epoch seconds, local time): ``12-06 02:34:30``."""
    return time.strftime("%m-%d %H:%M:%S", time.localtime(now_s))


def vllm_header(level: str, source: str, now_s: float) -> str:
    """vLLM's line header at ``now_s``: ``INFO 12-06 02:34:30 [launcher] ``."""
    return f"{level} {vllm_stamp(now_s)} [{source}] "


def stamp_uvicorn_lines(data: bytes, now_s: float) -> bytes:
    """``data`` (whole lines) with each uvicorn line of its own given vLLM's header at ``now_s``:
    ``INFO 12-06 02:34:30 [uvicorn] Application startup complete.``, so readers parse it as a vLLM line."""
    if data.find(b":") < 0:
        return data
    stamp = vllm_stamp(now_s).encode()

    def header(match: re.Match[bytes]) -> bytes:
        return (match[1] or b"") + match[3] + b" " + stamp + b" [" + UVICORN_SOURCE + b"] "

    return UVICORN_LINE_RE.sub(header, data)


READ_BYTES = 64 * 1024
MAX_PENDING_BYTES = 1 << 20
"""A piece without a line end is written once this long (a runaway line stays bounded)."""

Sink = Callable[[bytes], None]


def stream_sink(stream: BinaryIO) -> Sink:
    """A sink writing to ``stream`` and flushing; a closed or broken stream is ignored."""

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


def pump(fd: int, out: Masked, clock: Callable[[], float] = time.time) -> int:
    """Copy ``fd`` to ``out`` until end of file, whole lines at a time, uvicorn's lines stamped at ``clock()``; returns
    the bytes read. A last piece without a line end, or one of :data:`MAX_PENDING_BYTES`, is written as it is."""
    pending = b""
    copied = 0
    at_line_start = True
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
        cut = max(pending.rfind(b"\n"), pending.rfind(b"\r")) + 1  # up to the last line end; 0 without one
        if cut == 0 and len(pending) >= MAX_PENDING_BYTES:
            cut = len(pending)
        if cut:
            piece = pending[:cut]
            out.write(stamp_uvicorn_lines(piece, clock()) if at_line_start else piece)
            at_line_start = piece[-1:] in (b"\n", b"\r")
            pending = pending[cut:]
    if pending:
        out.write(stamp_uvicorn_lines(pending, clock()) if at_line_start else pending)
    return copied


def output(settings: Settings) -> tuple[Masked, RotatingWriter | None]:
    """Where the launcher and vLLM write, secrets masked: stdout, and with VLLM_LOG_TO_FILE ``logs/vllm.log``
    (rotated; stdout only, with a warning, when it cannot be written)."""
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
