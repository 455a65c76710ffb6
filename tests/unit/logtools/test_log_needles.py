"""The fast path's shortcuts give what the grammar's patterns give: message keys (``normalise``), the last stamp
before a line (``last_stamp``) and the bare error lines found through `` error:``, in every shape they come in."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.vllmlog.grammar import NORMALISE_PATTERN, STAMP_RE, last_stamp, normalise
from logtools.groups import ErrorEvent
from logtools.scan import LogScanner

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "logs"

MESSAGES = [
    "Sequence group chatcmpl-4dd8811e2348 is preempted by PreemptionMode.RECOMPUTE mode",
    "ValueError: prompt too long: 6997 tokens",
    "Error in chat completion stream generator.",
    "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total; 0xdeadbeef1 at cafe12:7f)",
    "request abc123-ffe1 failed after 3.5s at file.py:12, retry #2",
    "Zahl \u0663\u0664 (arabisch) und Wert \u00b2 und caf\u00e9 12",  # Unicode digits count as digits in both
    "x" * 190 + " id 1234567890abcdef",  # cut at 200 characters
    "",
    "no digits at all",
]


@pytest.mark.parametrize("message", MESSAGES)
def test_normalise_is_the_documented_pattern(message: str) -> None:
    """``normalise`` replaces exactly what ``re.sub(NORMALISE_PATTERN, "#", ...)`` replaces (it is faster)."""
    assert normalise(message) == re.sub(NORMALISE_PATTERN, "#", message[:200])


def test_last_stamp_is_the_last_match_of_the_stamp_pattern() -> None:
    """From every line end of recorded logs (coloured, Docker-stamped, old format), the last stamp found from the end
    is the last ``STAMP_RE`` match from the front, in windows of every size."""
    for name in ("vllm_0.11_ansi_colour.log", "vllm_0.11_docker_tp2_ready.log", "vllm_0.4_old_format.log"):
        data = (FIXTURES / name).read_bytes()
        ends = [at + 1 for at, byte in enumerate(data) if byte == ord("\n")]
        for end in ends[::3]:
            for lookback in (60, 1024, len(data)):
                begin = max(0, end - lookback)
                matches = list(STAMP_RE.finditer(data, begin, end))
                assert last_stamp(data, begin, end) == (matches[-1][1] if matches else None), (name, begin, end)


BARE_LINES = [
    b"api_server.py: error: unrecognized arguments: --max-num-seqz 4\n",
    b"vllm serve: error: argument --port: invalid int value: 'x'\n",
    b"Fatal Python error: Segmentation fault\n",
    b"\x1b[31mFatal Python error: Aborted\x1b[0m\n",
    b"2026-11-20T00:00:00.000000001Z api_server.py: error: behind a docker stamp\n",
    b"2026-11-20T00:00:00.000000002+00:00 stderr F Fatal Python error: behind a CRI stamp\n",
]
NOT_BARE = [
    b"an error: in a sentence\n",
    b"prog: error:no space\n",
    b"(APIServer pid=3) api_server.py: error: prefixed\n",
]


def test_bare_error_lines_are_found_in_every_shape(tmp_path: Path) -> None:
    """Error lines without a header (argparse, CPython's fatal errors), also coloured or behind container stamps,
    are ERROR events among many access lines; lines with `` error:`` that the grammar does not take are not."""
    access = b'INFO:     127.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n' * 500
    log = tmp_path / "vllm.log"
    log.write_bytes(b"".join(access + line for line in BARE_LINES + NOT_BARE) + access)
    events: list[ErrorEvent] = []
    LogScanner(on_event=events.append, block_bytes=8192).scan([log])
    assert [event.level for event in events] == ["ERROR"] * len(BARE_LINES)
    assert [event.message.split(": error: ")[-1].removeprefix("Fatal Python error: ") for event in events] == [
        "unrecognized arguments: --max-num-seqz 4",
        "argument --port: invalid int value: 'x'",
        "Segmentation fault",
        "Aborted",
        "behind a docker stamp",
        "behind a CRI stamp",
    ]
