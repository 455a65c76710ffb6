"""vLLM's output on its way to the log: every configured secret masked, uvicorn's own lines time-stamped, and
(containers) written to a rotated file.

The launcher runs vLLM as its child with stdout and stderr on a pipe and copies what comes through
:func:`pump` to its own stdout (supervisord's ``vllm.log``, or the container's log) and, with VLLM_LOG_TO_FILE, to
``logs/vllm.log`` rotated at VLLM_LOG_MAX_MB (:class:`core.logrotate.RotatingWriter`). Pieces are cut at line ends
(``\\n`` and the ``\\r`` of progress bars), so a secret is never split across two writes and masked in neither.

What vLLM writes to the log is chosen here too: its access log leaves out the stack's own polling
(:data:`QUIET_ENDPOINTS`, :func:`access_log_args`), and uvicorn's lines, which carry no time (``INFO:     Application
startup complete.``), get one in vLLM's header (:func:`stamp_uvicorn_lines`).
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
"""What the stack itself polls on vLLM: the sidecar scrapes ``/metrics`` every few seconds (thousands of lines a
session), the UI, ``make status``, the benchmark's checks, compose's and Kubernetes' probes and the router ask
``/health``, ``/v1/models`` and ``/version`` (``/ping`` and ``/load`` are vLLM's other probe endpoints). Their access
lines are left out of ``vllm.log`` so that requests (``POST /v1/chat/completions`` …) stay readable."""
ACCESS_LOG_FLAG = "--disable-access-log-for-endpoints"
"""vLLM's flag (>= 0.10) for a comma-separated list of paths uvicorn's access log leaves out (exact paths)."""


def access_log_args(extra_args: str) -> list[str]:
    """``--disable-access-log-for-endpoints /metrics,/health,…`` for vLLM's command line (:data:`QUIET_ENDPOINTS`);
    nothing when VLLM_EXTRA_ARGS (``extra_args``) sets the flag itself: its value wins (``=`` to log every path)."""
    return [] if has_flag(extra_args, ACCESS_LOG_FLAG) else [ACCESS_LOG_FLAG, ",".join(QUIET_ENDPOINTS)]


UVICORN_LINE_RE = re.compile(
    rb"^" + PREFIX + rb"(DEBUG|INFO|WARNING|ERROR|CRITICAL):[ ]{1,8}(?=[^\d\s:\-])(?![^\r\n]{0,300} - \"[A-Z]+ )",
    re.MULTILINE,
)
"""A line of uvicorn's own (``INFO:     Application startup complete.``, ``ERROR:    Exception in ASGI
application``), behind vLLM's process prefix or not: its level word, a colon and padding (groups: prefix, process,
level). An access line (``INFO:     127.0.0.1:5 - "GET …``, ``INFO:     ::1:5 - "POST …``) is left as it is:
readers skip those by that shape (:mod:`engine.vllmlog.startup`)."""
UVICORN_SOURCE = b"uvicorn"


def vllm_stamp(now_s: float) -> str:
    """vLLM's time stamp for ``now_s`` (epoch seconds, local time): ``12-06 02:34:30`` (``%m-%d %H:%M:%S``)."""
    return time.strftime("%m-%d %H:%M:%S", time.localtime(now_s))


def vllm_header(level: str, source: str, now_s: float) -> str:
    """vLLM's line header at ``now_s``: ``INFO 12-06 02:34:30 [launcher] ``."""
    return f"{level} {vllm_stamp(now_s)} [{source}] "


def stamp_uvicorn_lines(data: bytes, now_s: float) -> bytes:
    """``data`` (whole lines) with each uvicorn line of its own (:data:`UVICORN_LINE_RE`) given vLLM's header at
    ``now_s`` (epoch seconds, local time as vLLM's ``%m-%d %H:%M:%S``): ``INFO:     Application startup complete.``
    becomes ``INFO 12-06 02:34:30 [uvicorn] Application startup complete.``, which every reader of the log parses as
    a vLLM line (:data:`engine.vllmlog.grammar.VLLM_HEADER_RE`). Other lines are unchanged."""
    if data.find(b":") < 0:
        return data
    stamp = vllm_stamp(now_s).encode()

    def header(match: re.Match[bytes]) -> bytes:
        return (match[1] or b"") + match[3] + b" " + stamp + b" [" + UVICORN_SOURCE + b"] "

    return UVICORN_LINE_RE.sub(header, data)


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


def pump(fd: int, out: Masked, clock: Callable[[], float] = time.time) -> int:
    """Copy everything readable from ``fd`` to ``out`` until end of file, whole lines at a time, uvicorn's lines
    time-stamped at ``clock()`` (:func:`stamp_uvicorn_lines`); returns the bytes read. A last piece without a line
    end is written at the end; a piece of :data:`MAX_PENDING_BYTES` without one is written as it is (and the line it
    cuts is not stamped)."""
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
        cut = line_cut(pending)
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
