"""Times in logs and on the command line: ``--since`` values, vLLM's year-less local stamps, ISO 8601 strings.

Only ``time`` and ``re`` at import (``datetime`` is imported when an ISO string is parsed or written): start-up time
counts.
"""

from __future__ import annotations

import re
import time

SINCE_HELP = "a duration back from now (90s, 15m, 1h, 2d) or a local date-time (2026-11-29 21:00, 2026-11-29T21:00:00)"
_DURATION_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_SLACK_S = 2 * 86400.0
"""A stamp may lie this far after the reference time (clock skew, mtime of a rotated file) before it is taken as
belonging to the previous year."""
_MAX_CACHED_STAMPS = 4096


def parse_since(text: str, now_s: float | None = None) -> float:
    """Start of the ``--since`` window as epoch seconds.

    Args:
        text: a duration back from now (``90s``, ``15m``, ``1h``, ``2d``, bare seconds) or an ISO 8601 date-time.
        now_s: the current time, epoch seconds (default: ``time.time()``).

    Raises:
        ValueError: the text is neither; the message names the accepted formats.
    """
    now = time.time() if now_s is None else now_s
    match = _DURATION_RE.fullmatch(text)
    if match:
        seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
        if seconds <= 0:
            raise ValueError(f"--since {text!r} must be longer than zero; use {SINCE_HELP}")
        return now - seconds
    try:
        return iso_to_epoch_s(text.strip())
    except ValueError:
        raise ValueError(f"--since {text!r} is not understood; use {SINCE_HELP}") from None


def iso_to_epoch_s(text: str) -> float:
    """ISO 8601 date-time to epoch seconds (naive values are local time; ``Z`` means UTC).

    Raises:
        ValueError: not an ISO 8601 date-time.
    """
    from datetime import datetime

    return datetime.fromisoformat(text).timestamp()


def epoch_to_iso(epoch_s: float | None) -> str | None:
    """Epoch seconds to local ISO 8601 with seconds and offset, ``2026-11-29T21:55:01+00:00`` (None stays None)."""
    from datetime import datetime

    return None if epoch_s is None else datetime.fromtimestamp(epoch_s).astimezone().isoformat(timespec="seconds")


class StampClock:
    """vLLM's year-less stamps to epoch s, the year putting them at or before ``reference_s``."""

    def __init__(self, reference_s: float | None = None) -> None:
        self.reference_s: float = time.time() if reference_s is None else reference_s
        self._year = time.localtime(self.reference_s).tm_year
        self._midnight_s: dict[tuple[int, int], float | None] = {}
        self._stamps: dict[bytes, float | None] = {}

    def stamp_s(self, stamp: bytes) -> float | None:
        """Epoch seconds of ``b"MM-DD HH:MM:SS"`` (cached: lines of one second share the work); None if invalid."""
        if stamp in self._stamps:
            return self._stamps[stamp]
        try:
            value = self.epoch_s(int(stamp[0:2]), int(stamp[3:5]), int(stamp[6:8]), int(stamp[9:11]), int(stamp[12:14]))
        except ValueError:
            value = None
        if len(self._stamps) >= _MAX_CACHED_STAMPS:
            self._stamps.clear()
        self._stamps[stamp] = value
        return value

    def epoch_s(self, month: int, day: int, hour: int, minute: int, second: int) -> float | None:
        """Epoch seconds of the local stamp, None when it is not a real date or time."""
        key = (month, day)
        if key not in self._midnight_s:
            self._midnight_s[key] = self._midnight(month, day)
        midnight = self._midnight_s[key]
        if midnight is None or hour > 23 or minute > 59 or second > 60:
            return None
        return midnight + hour * 3600 + minute * 60 + second

    def _midnight(self, month: int, day: int) -> float | None:
        for year in (self._year, self._year - 1):
            try:
                stamp = time.mktime((year, month, day, 0, 0, 0, 0, 0, -1))
            except (OverflowError, ValueError):
                continue
            if time.localtime(stamp)[:3] != (year, month, day):  # mktime rolls 02-30 over to March
                continue
            if stamp <= self.reference_s + _SLACK_S:
                return stamp
        return None
