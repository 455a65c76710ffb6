"""What a scan of vLLM's log finds (:mod:`logtools.scan` fills them, the reports read them): problem records
(:class:`ErrorEvent`), uvicorn's access counts and the read facts (:class:`ScanResult`); and their pure grouping: one
group per level, source, and message and exception with digit-holding tokens masked; one example each, at most
:data:`MAX_GROUPS`."""

from __future__ import annotations

from core.logfiles import ReadStats
from core.parsing import epoch_to_iso
from engine.vllmlog.grammar import normalise, text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

LEVEL_RANK = {"CRITICAL": 0, "ERROR": 1, "WARNING": 2}
MAX_GROUPS = 1000
"""Distinct error groups kept; later new kinds are counted under one ``(other messages)`` group per level."""
OTHER = "(other messages)"
_MAX_CACHED_KEYS = 4096


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


class ErrorGroup:
    """Events of one kind: count, first and last time (epoch seconds) and the first event as the example."""

    __slots__ = (
        "count", "exception", "first_s", "last_before", "last_s", "level", "message", "process", "source", "traceback"
    )  # fmt: skip

    def __init__(self, event: ErrorEvent, other: bool = False) -> None:
        self.level = event.level
        self.source = None if other else event.source
        self.process = None if other else event.process
        self.message = OTHER if other else event.message
        self.exception = None if other else event.exception
        self.traceback: list[str] = [] if other else event.traceback_text()
        self.count = 0
        self.first_s: float | None = None
        self.last_s: float | None = None
        self.last_before = False
        """:attr:`last_s` is the time of the stamped line before an event without a stamp of its own."""

    def add(self, stamp_s: float | None, stamp_before: bool = False) -> None:
        """Count one more event at ``stamp_s`` (epoch s or None; ``stamp_before``: a line before's time)."""
        self.count += 1
        if stamp_s is not None:
            if self.first_s is None or stamp_s < self.first_s:
                self.first_s = stamp_s
            if self.last_s is None or stamp_s > self.last_s or (stamp_s == self.last_s and not stamp_before):
                self.last_s, self.last_before = stamp_s, stamp_before

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form; times as local ISO 8601."""
        return {
            "level": self.level,
            "count": self.count,
            "source": self.source,
            "process": self.process,
            "message": self.message,
            "exception": self.exception,
            "first_seen": epoch_to_iso(self.first_s),
            "last_seen": epoch_to_iso(self.last_s),
            "last_seen_from_line_before": self.last_before,
            "traceback": self.traceback,
        }


class ErrorGroups:
    """Counts events by group; ``add`` is the scanner's ``on_event`` callback."""

    def __init__(self, max_groups: int = MAX_GROUPS) -> None:
        self.max_groups = max_groups
        self.groups: dict[tuple[str, str | None, str, str], ErrorGroup] = {}
        self.by_level: dict[str, int] = {}
        self._keys: dict[str, str] = {}

    def _normalised(self, message: str) -> str:
        """:func:`~engine.vllmlog.grammar.normalise` with a bounded cache (many events repeat a message)."""
        key = self._keys.get(message)
        if key is None:
            if len(self._keys) >= _MAX_CACHED_KEYS:
                self._keys.clear()
            key = self._keys[message] = normalise(message)
        return key

    def add(self, event: ErrorEvent) -> None:
        """Count ``event`` in its group (a new group keeps the event as its example)."""
        self.by_level[event.level] = self.by_level.get(event.level, 0) + 1
        key = (event.level, event.source, self._normalised(event.message), self._normalised(event.exception or ""))
        group = self.groups.get(key)
        if group is None:
            other = len(self.groups) >= self.max_groups
            if other:
                key = (event.level, None, OTHER, "")
                group = self.groups.get(key)
            if group is None:
                group = self.groups[key] = ErrorGroup(event, other)
        group.add(event.stamp_s, event.stamp_before)

    def summary(self, limit: int) -> dict[str, Any]:
        """Event counts by level and the groups, most severe first, then most frequent; at most ``limit`` of them."""
        ordered = sorted(self.groups.values(), key=lambda g: (LEVEL_RANK.get(g.level, 9), -g.count, g.first_s or 0))
        return {
            "events": sum(self.by_level.values()),
            "by_level": dict(sorted(self.by_level.items(), key=lambda item: LEVEL_RANK.get(item[0], 9))),
            "groups_total": len(ordered),
            "groups": [group.as_dict() for group in ordered[:limit]],
        }
