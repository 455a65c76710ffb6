"""Kubernetes (CRI) log files read for errors alone: partial lines joined only around candidate lines give the same
events as joining whole blocks; lines without a stamp are dated from the spans before them."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from logtools.groups import ErrorEvent
from logtools.scan import _MAX_TAILS, LogScanner
from tests.synthlog import generate_current_log

CRI_DEAD = Path(__file__).resolve().parents[2] / "fixtures" / "logs" / "vllm_0.11_k8s_cri_engine_dead.log"


def scanned(path: Path, block_bytes: int, whole_blocks: bool) -> list[tuple[object, ...]]:
    """The events of ``path`` as tuples; ``whole_blocks``: the stats path, which joins partial lines block-wide."""
    events: list[ErrorEvent] = []
    on_metrics = (lambda rows, first, last: None) if whole_blocks else None
    LogScanner(on_event=events.append, on_metrics=on_metrics, block_bytes=block_bytes).scan([path])
    return [(e.level, e.message, e.exception, e.process, e.source, e.stamp_s, e.traceback_raw) for e in events]


def split_cri(lines: list[bytes], rng: random.Random) -> bytes:
    """``lines`` as a CRI file in which most long lines are split in two to four parts after their first 40 bytes
    (containerd splits at 16 KiB, so the header and the level word are always in the first part)."""
    out = []
    for number, line in enumerate(lines):
        stamp = b"2026-11-20T00:00:00.%09d+00:00 stderr " % number
        body, cuts = line, []
        if len(body) > 60 and rng.random() < 0.7:
            cuts = sorted(rng.sample(range(40, len(body) - 1), rng.randint(1, 3)))
        previous = 0
        for cut in cuts:
            out.append(stamp + b"P " + body[previous:cut] + b"\n")
            previous = cut
        out.append(stamp + b"F " + body[previous:])
    return b"".join(out)


@pytest.mark.parametrize("block_bytes", [700, 4096, 1 << 20])
def test_cri_partial_lines_give_the_same_events_as_whole_block_joining(tmp_path: Path, block_bytes: int) -> None:
    """Errors, warnings and tracebacks (their lines split in parts, also across block boundaries) come out as from the
    same lines unsplit, whether partial lines are joined around candidates (--errors) or in whole blocks (--stats)."""
    log = tmp_path / "vllm.log"
    facts = generate_current_log(log, n_lines=3000, errors=40, seed=7)
    cri = tmp_path / "cri.log"
    cri.write_bytes(split_cri(log.read_bytes().splitlines(keepends=True), random.Random(block_bytes)))
    fast = scanned(cri, block_bytes, whole_blocks=False)
    assert fast == scanned(log, block_bytes, whole_blocks=False)  # as the same lines unsplit and unstamped
    assert fast == scanned(cri, block_bytes, whole_blocks=True)
    levels = [event[0] for event in fast]
    assert levels.count("ERROR") == facts.error_events and levels.count("WARNING") == facts.warning_events
    assert sum(1 for event in fast if event[6]) == facts.traceback_events  # tracebacks kept whole


def test_recorded_cri_log_gives_the_same_events_both_ways() -> None:
    """The recorded Kubernetes log of a dead engine gives the same events on the --errors path as on the stats path."""
    for block_bytes in (512, 1 << 20):
        fast = scanned(CRI_DEAD, block_bytes, whole_blocks=False)
        assert fast and fast == scanned(CRI_DEAD, block_bytes, whole_blocks=True)


def test_line_without_stamp_is_dated_from_many_spans_before(tmp_path: Path) -> None:
    """A bare traceback after more than the kept number of stampless spans gets the time of the last stamped line
    before it, however many spans ago."""
    log = tmp_path / "vllm.log"
    filler = b"(APIServer pid=1) INFO:     127.0.0.1:5000 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK\n" * 40
    stamped = b"(APIServer pid=1) INFO 11-29 21:55:01 [loggers.py:1] ready\n"
    bare = b"Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: boom\n"
    log.write_bytes(stamped + filler * (_MAX_TAILS * 3) + bare)
    events: list[ErrorEvent] = []
    LogScanner(on_event=events.append, block_bytes=len(filler)).scan([log])
    assert [e.message for e in events] == ["ValueError: boom"]
    assert events[0].stamp_before and events[0].stamp_s is not None
    assert time.strftime("%H:%M:%S", time.localtime(events[0].stamp_s)) == "21:55:01"
