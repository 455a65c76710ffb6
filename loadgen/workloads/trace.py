"""TRACE: a timestamped production trace replayed on its own schedule (pure: parsing, checks, the schedule).

Formats, chosen by content:

- **BurstGPT CSV**: ``Timestamp`` (s from the trace's start), ``Request tokens`` and ``Response tokens`` are read
  (the other columns may be absent).
- **Mooncake JSONL**: ``{"timestamp": <ms>, "input_length": N, "output_length": M, "hash_ids": [...]}`` per line;
  ``hash_ids`` name the prompt's :data:`BLOCK_TOKENS`-token blocks, shared between rows as in the trace.

Every row is checked before any load (a :class:`TraceError` names file, line and fault); timestamps must not
decrease. A row asking for 0 output tokens (BurstGPT's failed requests) is replayed asking for 1.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCK_TOKENS = 512  # Mooncake's hash_ids each name a block of this many prompt tokens
BURSTGPT = "burstgpt"
MOONCAKE = "mooncake"
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


class TraceError(ValueError):
    """A trace file that cannot be replayed; the message names the file, the line and what is wrong."""


@dataclass(frozen=True)
class TraceRow:
    """One request of a trace: arrival (s from the trace's origin), prompt and output tokens, the shared blocks its
    prompt starts with (Mooncake's ``hash_ids``) and its line number."""

    at_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    line: int = 0


@dataclass(frozen=True)
class Trace:
    """A parsed trace: file, format (:data:`BURSTGPT` or :data:`MOONCAKE`), sha256 hex of its bytes, rows in order."""

    path: Path
    format: str
    sha256: str
    rows: list[TraceRow] = field(default_factory=list)


def _fail(path: Path, line: int, what: str) -> TraceError:
    return TraceError(f"TRACE={path}: line {line}: {what}")


def _count(value: Any, name: str, path: Path, line: int, minimum: int) -> int:
    """``value`` as a whole number of at least ``minimum`` (JSON ints, or CSV text like ``12`` or ``12.0``)."""
    if isinstance(value, bool):
        raise _fail(path, line, f"{name} is {value!r}, not a number of tokens")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise _fail(path, line, f"{name} is {value!r}, not a number of tokens") from None
    if not isinstance(value, int | float) or not math.isfinite(value) or value != int(value):
        raise _fail(path, line, f"{name} is {value!r}, not a whole number of tokens")
    if value < minimum:
        raise _fail(path, line, f"{name} is {int(value)}; it must be at least {minimum}")
    return int(value)


def _seconds(value: Any, name: str, path: Path, line: int, scale: float) -> float:
    """``value`` (a number, or CSV text) × ``scale`` as seconds ≥ 0."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise _fail(path, line, f"{name} is {value!r}, not a number") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise _fail(path, line, f"{name} is {value!r}; it must be a number ≥ 0")
    return float(value) * scale


def _burstgpt_rows(path: Path, text: str) -> list[TraceRow]:
    lines = text.splitlines()
    header = next(csv.reader(lines[:1]))
    missing = [c for c in BURSTGPT_COLUMNS if c not in header]
    if missing:
        raise _fail(path, 1, f"the CSV header lacks the column(s) {missing} (BurstGPT: {','.join(BURSTGPT_COLUMNS)})")
    where = {c: header.index(c) for c in BURSTGPT_COLUMNS}
    rows = []
    for number, cells in enumerate(csv.reader(lines[1:]), start=2):
        if not cells or not "".join(cells).strip():
            continue
        if len(cells) != len(header):
            raise _fail(path, number, f"{len(cells)} fields where the header has {len(header)}")
        rows.append(TraceRow(at_s=_seconds(cells[where["Timestamp"]], "Timestamp", path, number, 1.0),
                             input_tokens=_count(cells[where["Request tokens"]], "Request tokens", path, number, 1),
                             output_tokens=_count(cells[where["Response tokens"]], "Response tokens", path, number, 0),
                             line=number))
    return rows


def _mooncake_row(path: Path, number: int, raw: str) -> TraceRow:
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _fail(path, number, f"not JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise _fail(path, number, "not a JSON object")
    for key in ("timestamp", "input_length", "output_length"):
        if key not in obj:
            raise _fail(path, number, f"no {key!r} (Mooncake: timestamp in ms, input_length, output_length)")
    tokens = _count(obj["input_length"], "input_length", path, number, 1)
    hash_ids = obj.get("hash_ids", [])
    if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hash_ids):
        raise _fail(path, number, f"hash_ids is {str(hash_ids)[:80]}, not a list of whole numbers")
    if len(hash_ids) > math.ceil(tokens / BLOCK_TOKENS):
        raise _fail(path, number, f"hash_ids names {len(hash_ids)} blocks of {BLOCK_TOKENS} tokens, more than "
                                  f"input_length={tokens} holds ({math.ceil(tokens / BLOCK_TOKENS)})")
    return TraceRow(at_s=_seconds(obj["timestamp"], "timestamp", path, number, 0.001), input_tokens=tokens,
                    output_tokens=_count(obj["output_length"], "output_length", path, number, 0),
                    hash_ids=tuple(hash_ids), line=number)


def load_trace(path: Path, data: bytes | None = None) -> Trace:
    """The trace at ``path`` (read, or its bytes ``data`` when given), its format found by content.

    Raises:
        TraceError: unreadable, not UTF-8, empty, neither format, or a bad row (the message names file, line and
            fault, and what to do).
    """
    try:
        data = path.read_bytes() if data is None else data
    except OSError as exc:
        raise TraceError(f"TRACE={path}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceError(f"TRACE={path}: not UTF-8 text (byte {exc.start})") from None
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if first.startswith("{"):
        kind = MOONCAKE
        rows = [_mooncake_row(path, n, raw) for n, raw in enumerate(text.splitlines(), start=1) if raw.strip()]
    elif "Timestamp" in first.split(","):
        kind, rows = BURSTGPT, _burstgpt_rows(path, text)
    elif not first:
        raise TraceError(f"TRACE={path}: the file is empty; give a BurstGPT CSV or a Mooncake JSONL trace")
    else:
        raise _fail(path, 1, "neither a BurstGPT CSV header (Timestamp,...,Request tokens,Response tokens,...) nor "
                             "a Mooncake JSONL object ({\"timestamp\": ms, \"input_length\", \"output_length\"})")
    if not rows:
        raise TraceError(f"TRACE={path}: no rows after the header; nothing to replay")
    for before, row in itertools.pairwise(rows):
        if row.at_s < before.at_s:
            raise _fail(path, row.line, f"timestamp {row.at_s:g} s is before line {before.line}'s {before.at_s:g} s: "
                                        "a trace is replayed in order; sort it by timestamp")
    return Trace(path, kind, hashlib.sha256(data).hexdigest(), rows)


def schedule(rows: Sequence[TraceRow], speed: float = 1.0, requests: int | None = None,
             duration_s: float | None = None) -> list[tuple[float, TraceRow]]:
    """The replay's schedule: ``(s after the start, row)`` for the first ``requests`` rows (None: all), each at its
    timestamp minus the first row's, divided by ``speed``; rows after ``duration_s`` are cut.

    Raises:
        ValueError: ``speed`` is not finite and > 0.
    """
    if not math.isfinite(speed) or speed <= 0:
        raise ValueError(f"TRACE_SPEED={speed} must be a number > 0 (2: twice as fast)")
    chosen = list(rows[:requests] if requests is not None else rows)
    if not chosen:
        return []
    start = chosen[0].at_s
    timed = [((row.at_s - start) / speed, row) for row in chosen]
    return [(at, row) for at, row in timed if duration_s is None or at <= duration_s]


def mean_rate(offsets_s: Sequence[float]) -> float:
    """The schedule's mean arrival rate, req/s: (n − 1) / span, or n without a span."""
    span = offsets_s[-1] - offsets_s[0] if offsets_s else 0.0
    return (len(offsets_s) - 1) / span if span > 0 else float(max(1, len(offsets_s)))


def schedule_problem(path: Path, timed: Sequence[tuple[float, TraceRow]], max_model_len: int | None,
                     watchdog_s: float) -> str | None:
    """Why the replay cannot run (None: it can): no row left, a row too long for the context, or a gap between
    arrivals longer than the watchdog."""
    if not timed:
        return f"TRACE={path}: no row is scheduled within DURATION; lengthen it or raise TRACE_SPEED"
    if max_model_len is not None:
        for _, row in timed:
            if row.input_tokens + max(1, row.output_tokens) > max_model_len:
                return (f"TRACE={path}: line {row.line}: input {row.input_tokens} + output {row.output_tokens} tokens "
                        f"cannot fit the model's max_model_len={max_model_len}; serve a longer context or cut the "
                        "trace (--requests)")
    for (before, a), (after, b) in itertools.pairwise(timed):
        if after - before > watchdog_s:
            return (f"TRACE={path}: lines {a.line}-{b.line} are {after - before:.0f} s apart at this TRACE_SPEED, "
                    f"longer than the watchdog's {watchdog_s:g} s (WATCHDOG_S) that stops a run with nothing "
                    "finishing; raise TRACE_SPEED or WATCHDOG_S")
    return None
