"""Times for the log analyzer: --since values, year-less vLLM stamps, ISO 8601 output."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from core.parsing import StampClock, epoch_to_iso, parse_since

NOW_S = datetime(2026, 11, 29, 22, 0, 0).timestamp()


@pytest.mark.parametrize(
    ("text", "seconds_back"), [("90", 90), ("90s", 90), ("15m", 900), ("1h", 3600), ("2d", 172800)]
)
def test_since_durations(text: str, seconds_back: int) -> None:
    """Durations count back from now (s/m/h/d suffixes, bare seconds)."""
    assert parse_since(text, now_s=NOW_S) == pytest.approx(NOW_S - seconds_back)


def test_since_local_date_time() -> None:
    """A date-time without offset is local time; ``T`` or a space both work."""
    assert parse_since("2026-11-29 21:00", now_s=NOW_S) == datetime(2026, 11, 29, 21).timestamp()
    assert parse_since("2026-11-29T21:00:00", now_s=NOW_S) == datetime(2026, 11, 29, 21).timestamp()


@pytest.mark.parametrize("text", ["yesterday", "0s", "-5m", "1w", ""])
def test_since_rejects_with_the_accepted_formats(text: str) -> None:
    """Anything else raises ValueError naming the accepted formats."""
    with pytest.raises(ValueError, match="duration back from now"):
        parse_since(text, now_s=NOW_S)


def test_stamps_take_the_year_of_the_file() -> None:
    """A stamp gets the year that puts it at or before the file's last write."""
    clock = StampClock(datetime(2026, 11, 29, 23, 0).timestamp())
    assert clock.stamp_s(b"11-29 21:55:01") == datetime(2026, 11, 29, 21, 55, 1).timestamp()


def test_december_lines_in_a_january_file_are_last_year() -> None:
    """A log written across New Year: December stamps belong to the previous year."""
    clock = StampClock(datetime(2027, 1, 2, 8, 0).timestamp())
    assert clock.stamp_s(b"12-31 23:59:59") == datetime(2026, 12, 31, 23, 59, 59).timestamp()
    assert clock.stamp_s(b"01-02 07:00:00") == datetime(2027, 1, 2, 7, 0, 0).timestamp()


@pytest.mark.parametrize("stamp", [b"02-30 10:00:00", b"13-01 10:00:00", b"11-29 25:00:00", b"ab-cd ef:gh:ij"])
def test_impossible_stamps_are_none(stamp: bytes) -> None:
    """Impossible dates or times give None instead of a wrong time or an exception."""
    assert StampClock(NOW_S).stamp_s(stamp) is None


def test_iso_output_has_seconds_and_offset() -> None:
    """Times are written as local ISO 8601 with the UTC offset."""
    text = epoch_to_iso(NOW_S)
    assert text is not None and text.startswith("2026-11-29T22:00:00") and text[19] in "+-"
    assert datetime.fromisoformat(text).timestamp() == NOW_S
    assert epoch_to_iso(None) is None
    assert time.localtime(NOW_S).tm_hour == 22
