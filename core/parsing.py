"""Parsers of text forms: the knobs' (durations, input mix, SLOs, sweeps) and the name/id patterns, each raising
``ValueError`` naming the variable and a valid example; times in logs and on the command line (``--since``, vLLM's
year-less local stamps, ISO 8601 strings).

Only ``math``, ``time`` and ``re`` (which loads ``functools``) at import (``datetime`` is imported when an ISO string
is parsed or written): start-up time counts.
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator

_DURATION_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*")  # days: --since only
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_SLO_RE = re.compile(r"\s*(\w+)\s*<=\s*(\S+)\s*")

# Input-length buckets of the workload (by characters of the whole conversation).
BUCKETS = ("short", "medium", "long")
# Latencies an SLO may bound (goodput), milliseconds: ttft_ms is the first token of any kind (vLLM's), answer_ttft_ms
# the first answer token of a reasoning stream (core.reasoning).
SLO_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "answer_ttft_ms")
# A baseline name: letters, digits, '_', '.', '-', starting with a letter or digit, 1-64 characters.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")


def parse_duration_s(text: str) -> float:
    """Parse ``"90"``, ``"90s"``, ``"1.5m"``, ``"2h"`` or ``"500ms"`` into seconds.

    Raises:
        ValueError: the text is not a positive number with an optional unit ms/s/m/h.
    """
    match = _DURATION_RE.fullmatch(text)
    if not match or match.group(2) == "d":
        raise ValueError(f"{text!r} is not a duration; use e.g. 60, 60s, 5m or 1h")
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if seconds <= 0:
        raise ValueError(f"{text!r} must be longer than zero")
    return seconds


def parse_mix(text: str) -> dict[str, float]:
    """Parse ``"short:0.3,medium:0.5,long:0.2"`` into normalised bucket weights (summing to 1).

    Raises:
        ValueError: unknown or repeated bucket, a weight that is not a finite number >= 0, or all weights zero.
    """
    weights: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition(":")
        name = name.strip()
        weight = _finite(value)
        if name not in BUCKETS or weight is None or weight < 0:
            raise ValueError(
                f"INPUT_MIX part {part!r} does not parse: use bucket:weight with buckets {', '.join(BUCKETS)} and "
                "finite weights >= 0, e.g. short:0.3,medium:0.5,long:0.2"
            )
        if name in weights:
            raise ValueError(f"INPUT_MIX names {name!r} twice: give each bucket one weight")
        weights[name] = weight
    total = sum(weights.values())
    if total <= 0:
        raise ValueError("INPUT_MIX weights add up to zero: give at least one bucket a weight above 0")
    return {k: v / total for k, v in weights.items()}


def parse_slo(text: str) -> dict[str, float]:
    """Parse ``"ttft_ms<=500,e2e_ms<=2000"`` into ``{"ttft_ms": 500.0, "e2e_ms": 2000.0}``.

    Raises:
        ValueError: a part not ``<metric><=<number > 0>``, a metric outside :data:`SLO_METRICS`, or repeated.
    """
    slo: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = _SLO_RE.fullmatch(part)
        bound = _finite(match.group(2)) if match else None
        if not match or match.group(1) not in SLO_METRICS or bound is None or bound < 0:
            raise ValueError(
                f'SLO part {part!r} does not parse: use e.g. SLO="ttft_ms<=500,e2e_ms<=2000" '
                f"with metrics {', '.join(SLO_METRICS)} and finite bounds in ms"
            )
        if bound == 0:
            raise ValueError(
                f"SLO part {part!r} can never be met: no request has a {match.group(1)} of 0 ms; give a bound above 0, "
                f"e.g. {match.group(1)}<=500"
            )
        if match.group(1) in slo:
            raise ValueError(f"SLO names {match.group(1)} twice: give each metric one bound")
        slo[match.group(1)] = bound
    return slo


def _finite(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def validate_name(name: str, what: str = "baseline name") -> str:
    """Return ``name`` when the whole of it matches :data:`NAME_RE` (a trailing newline does not pass).

    Raises:
        ValueError: anything else; the message says what is allowed.
    """
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ValueError(
            f"{name!r} is not a valid {what}: use 1-64 letters, digits, '_', '.' or '-', starting with a letter or "
            "digit (e.g. v0.2.1)"
        )
    return name


def flag_roles(argv: Iterable[str], is_flag: Callable[[str], bool]) -> Iterator[tuple[str, str]]:
    """Each argument of ``argv`` as ``flag`` (an option whose name, before any ``=value``, ``is_flag`` accepts),
    ``value`` (one of the arguments after such a flag, up to the next option) or ``plain``."""
    taking = False
    for arg in argv:
        if arg.startswith("-") and len(arg) > 1:
            name, eq, _ = arg.partition("=")
            hit = is_flag(name)
            taking = hit and not eq
            yield arg, "flag" if hit else "plain"
        else:
            yield arg, "value" if taking else "plain"


def option_values(args: Iterable[str], flag: str | Callable[[str], bool]) -> list[str]:
    """Every non-empty value given to ``flag`` (or to the flags a callable accepts) in ``args`` (``--flag a b``,
    ``--flag=a``), in order."""
    roles = flag_roles(args, flag if callable(flag) else flag.__eq__)
    values = [arg.partition("=")[2] if role == "flag" else arg for arg, role in roles if role != "plain"]
    return [value for value in values if value]


SWEEP_KINDS = ("auto", "concurrency", "rate")


def parse_sweep(text: str) -> tuple[str, list[float]]:
    """Parse SWEEP (``auto``, ``concurrency:1,2,4``, ``rate:0.5,1``) into ``(kind, ascending loads)``.

    Raises:
        ValueError: an unknown kind, a load not finite and > 0 (whole for concurrency), or no load.
    """
    example = "use SWEEP=auto, SWEEP=concurrency:1,2,4,8 or SWEEP=rate:0.5,1,2,4"
    kind, _, rest = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind not in SWEEP_KINDS:
        raise ValueError(f"SWEEP={text!r} does not parse: {example}")
    if kind == "auto":
        if rest.strip():
            raise ValueError(f"SWEEP=auto takes no loads (got {rest!r}); SWEEP_RATES sets how many rates it adds")
        return kind, []
    loads: set[float] = set()
    for part in filter(None, (p.strip() for p in rest.split(","))):
        value = _finite(part)
        if value is None or value <= 0 or (kind == "concurrency" and not value.is_integer()):
            what = "whole numbers >= 1" if kind == "concurrency" else "finite numbers > 0 (requests/s)"
            raise ValueError(f"SWEEP {kind} load {part!r} does not parse: loads are {what}; {example}")
        loads.add(value)
    if not loads:
        raise ValueError(f"SWEEP={text!r} lists no load: {example}")
    return kind, sorted(loads)


SINCE_HELP = "a duration back from now (90s, 15m, 1h, 2d) or a local date-time (2026-11-29 21:00, 2026-11-29T21:00:00)"
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
        self._cached_stamp_s = functools.lru_cache(maxsize=_MAX_CACHED_STAMPS)(self._stamp_s)
        self._midnight_s = functools.cache(self._midnight)

    def stamp_s(self, stamp: bytes) -> float | None:
        """Epoch seconds of ``b"MM-DD HH:MM:SS"`` (cached: lines of one second share the work); None if invalid."""
        return self._cached_stamp_s(stamp)

    def _stamp_s(self, stamp: bytes) -> float | None:
        try:
            month, day, hour, minute, second = (int(stamp[at : at + 2]) for at in range(0, 13, 3))
        except ValueError:
            return None
        midnight = self._midnight_s(month, day)
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
