"""What a scan of vLLM's log finds: problem records (:class:`ErrorEvent`), uvicorn's access counts and the read
facts (:class:`ScanResult`); :mod:`logtools.scan` fills them, the reports read them."""

from __future__ import annotations

from core.logfiles import ReadStats
from engine.vllmlog.grammar import text


class ErrorEvent:
    """A WARNING/ERROR/CRITICAL record or a bare traceback; ``stamp_s`` in epoch seconds."""

    __slots__ = ("exception", "level", "message", "process", "source", "stamp_before", "stamp_s", "traceback_raw")

    def __init__(
        self,
        level: str,
        stamp_s: float | None,
        process: str | None,
        source: str | None,
        message: str,
        exception: str | None = None,
        traceback_raw: list[bytes] | None = None,
        stamp_before: bool = False,
    ) -> None:
        self.level = level
        self.stamp_s = stamp_s
        """The record's stamp, else the nearest stamped line's before it (:attr:`stamp_before`), else None."""
        self.stamp_before = stamp_before
        self.process = process
        self.source = source
        """``file.py:line`` from vLLM's header, None for bare tracebacks and other formats."""
        self.message = message
        """The record's first line (for a bare traceback: its exception line)."""
        self.exception = exception
        """The traceback's last exception line (``ValueError: ...``), None without traceback."""
        self.traceback_raw = traceback_raw or []
        """Traceback lines as read (decoded only when shown)."""

    def traceback_text(self) -> list[str]:
        """The traceback lines as printable text."""
        return [text(line) for line in self.traceback_raw]


class HttpCounts:
    """uvicorn access lines: inference requests (``POST /v1/...``) and error responses by status class."""

    def __init__(self) -> None:
        self.inference_requests = 0
        self.status_4xx = 0
        self.status_5xx = 0


class ScanResult:
    """What one pass found; ``lines`` (inside the window) and ``http`` are counted only with ``on_metrics``."""

    def __init__(self) -> None:
        self.read = ReadStats()
        self.lines = 0
        self.http = HttpCounts()
        self.skipped_files: list[str] = []
