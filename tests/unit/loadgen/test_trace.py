"""TRACE: the BurstGPT and Mooncake parsers (good rows, each kind of bad row), the schedule (TRACE_SPEED, REQUESTS,
DURATION), the checks before load, the plan and the fingerprint, and the token-exact prompts with shared blocks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from pydantic import ValidationError

from core.fingerprint import fingerprint_fields
from core.report_schema import BenchmarkConfig, Environment
from core.requestlog import RequestLog
from core.settings import PROJECT_ROOT, Settings
from loadgen.locust_side.process_state import RunState, Slot
from loadgen.locust_side.user_actions import arrivals
from loadgen.plan import bench_config, with_trace
from loadgen.selftest.mock_answers import tokenize_answer
from loadgen.workloads.randomdata import exact_text, row_ids, trace_requests
from loadgen.workloads.tokenizing import ServerTokenizer
from loadgen.workloads.trace import (
    BURSTGPT,
    MOONCAKE,
    Trace,
    TraceError,
    TraceRow,
    load_trace,
    mean_rate,
    schedule,
    schedule_problem,
)
from tests.unit.loadgen.test_load_processes import plan

SAMPLES = PROJECT_ROOT / "loadgen" / "workloads" / "data" / "traces"
HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def _parse(text: str, name: str = "t") -> Trace:
    return load_trace(Path(name), text.encode())


def test_burstgpt_rows_are_read_by_column_name() -> None:
    """BurstGPT CSV: timestamps in s, request and response tokens by header name (any column order, extra columns
    ignored); a 0-token response (a failed request) is kept."""
    trace = load_trace(Path("b.csv"), (HEADER + "0,ChatGPT,10,5,15,Conversation log\n"
                                       "1.5,GPT-4,20,0,20,API log\n\n").encode())
    assert trace.format == BURSTGPT
    assert [(r.at_s, r.input_tokens, r.output_tokens, r.line) for r in trace.rows] == [(0.0, 10, 5, 2), (1.5, 20, 0, 3)]
    reordered = load_trace(Path("b.csv"), b"Response tokens,Timestamp,Request tokens\n7,2.0,30\n")
    assert [(r.at_s, r.input_tokens, r.output_tokens) for r in reordered.rows] == [(2.0, 30, 7)]


def test_mooncake_rows_read_milliseconds_and_hash_ids() -> None:
    """Mooncake JSONL: timestamp in ms, lengths and hash_ids (optional) per line; blank lines skipped."""
    trace = load_trace(Path("m.jsonl"), b'{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [4, 9]}'
                                         b'\n\n{"timestamp": 1500, "input_length": 10, "output_length": 1}\n')
    assert trace.format == MOONCAKE
    assert [(r.at_s, r.input_tokens, r.output_tokens, r.hash_ids, r.line) for r in trace.rows] == [
        (0.0, 600, 3, (4, 9), 1), (1.5, 10, 1, (), 3)]


@pytest.mark.parametrize(("text", "fault"), [
    (HEADER + "0,ChatGPT,10,5,15\n", "line 2: 5 fields where the header has 6"),
    (HEADER + "soon,ChatGPT,10,5,15,x\n", "line 2: Timestamp is 'soon', not a number"),
    (HEADER + "-1,ChatGPT,10,5,15,x\n", "line 2: Timestamp is -1.0; it must be a number ≥ 0"),
    (HEADER + "0,ChatGPT,ten,5,15,x\n", "line 2: Request tokens is 'ten', not a number of tokens"),
    (HEADER + "0,ChatGPT,0,5,5,x\n", "line 2: Request tokens is 0; it must be at least 1"),
    (HEADER + "0,ChatGPT,10,2.5,15,x\n", "line 2: Response tokens is 2.5, not a whole number of tokens"),
    (HEADER + "0,ChatGPT,10,-2,8,x\n", "line 2: Response tokens is -2; it must be at least 0"),
    (HEADER + "5,ChatGPT,10,2,12,x\n4,ChatGPT,10,2,12,x\n", "line 3: timestamp 4 s is before line 2's 5 s"),
    ("Timestamp,Model\n0,x\n", "line 1: the CSV header lacks the column(s) ['Request tokens', 'Response tokens']"),
    (HEADER, "no rows after the header"),
    ('{"timestamp": 0, "input_length": 5\n', "line 1: not JSON"),
    ("[1, 2]\n", "line 1: neither a BurstGPT CSV header"),
    ('{"timestamp": 0}\n["x"]\n', "line 1: no 'input_length'"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1}\n["x"]\n', "line 2: not a JSON object"),
    ('{"timestamp": 0, "input_length": true, "output_length": 1}\n', "line 1: input_length is True"),
    ('{"timestamp": "now", "input_length": 5, "output_length": 1}\n', "line 1: timestamp is 'now', not a number"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, "a"]}\n',
     "line 1: hash_ids is [1, 'a'], not a list of whole numbers"),
    ('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2, 3]}\n',
     "line 1: hash_ids names 3 blocks of 512 tokens, more than input_length=600 holds (2)"),
    ("", "the file is empty"),
    ("hello\n", "line 1: neither a BurstGPT CSV header"),
])  # fmt: skip
def test_bad_rows_are_refused_naming_file_line_and_fault(text: str, fault: str) -> None:
    """Each kind of bad row or file: a TraceError naming the file, the line and what is wrong."""
    with pytest.raises(TraceError) as caught:
        _parse(text, "bad.trace")
    assert str(caught.value).startswith("TRACE=bad.trace: ") and fault in str(caught.value), str(caught.value)


def test_unreadable_and_non_utf8_files_are_refused(tmp_path: Path) -> None:
    """A missing file or one that is not UTF-8 text is a TraceError saying so."""
    with pytest.raises(TraceError, match="cannot read it"):
        load_trace(tmp_path / "none.csv")
    with pytest.raises(TraceError, match="not UTF-8"):
        load_trace(Path("x.csv"), b"\xff\xfe\x00")


def test_the_samples_parse_and_their_hash_is_of_the_bytes() -> None:
    """The shipped samples are a few dozen rows each, of their format; the hash changes with one byte."""
    burst, moon = load_trace(SAMPLES / "burstgpt_sample.csv"), load_trace(SAMPLES / "mooncake_sample.jsonl")
    assert (burst.format, moon.format) == (BURSTGPT, MOONCAKE) and 24 <= len(burst.rows) <= 60
    assert 24 <= len(moon.rows) <= 60 and any(len(r.hash_ids) > 1 for r in moon.rows)
    data = (SAMPLES / "burstgpt_sample.csv").read_bytes()
    assert load_trace(Path("x"), data).sha256 == burst.sha256 != load_trace(Path("x"), data + b"\n").sha256


ROWS = [TraceRow(at_s=t, input_tokens=10, output_tokens=2, line=i + 2) for i, t in enumerate([100.0, 101.0, 103.0,
                                                                                               107.0, 115.0])]


def test_schedule_is_the_trace_times_from_the_first_row_divided_by_speed() -> None:
    """The first row leaves at 0; the others at (t - t0) / TRACE_SPEED; 2 halves every gap."""
    assert [at for at, _ in schedule(ROWS)] == [0.0, 1.0, 3.0, 7.0, 15.0]
    assert [at for at, _ in schedule(ROWS, 2.0)] == [0.0, 0.5, 1.5, 3.5, 7.5]
    assert [at for at, _ in schedule(ROWS, 0.5)] == [0.0, 2.0, 6.0, 14.0, 30.0]
    with pytest.raises(ValueError, match="TRACE_SPEED"):
        schedule(ROWS, 0.0)


def test_requests_take_the_first_rows_and_duration_cuts_the_schedule() -> None:
    """REQUESTS=N keeps the first N rows; DURATION keeps the rows scheduled within it (after TRACE_SPEED)."""
    assert [r.line for _, r in schedule(ROWS, requests=3)] == [2, 3, 4]
    assert [r.line for _, r in schedule(ROWS, duration_s=7.0)] == [2, 3, 4, 5]
    assert [r.line for _, r in schedule(ROWS, 2.0, duration_s=7.0)] == [2, 3, 4, 5]
    assert [r.line for _, r in schedule(ROWS, 4.0, requests=4, duration_s=1.0)] == [2, 3, 4]
    assert mean_rate([0.0, 1.0, 3.0, 7.0, 15.0]) == pytest.approx(4 / 15) and mean_rate([0.0, 0.0]) == 2.0


def test_schedule_problems_name_the_lines() -> None:
    """Before load: a row not fitting the context and a gap longer than the watchdog are refused with their lines;
    nothing scheduled within DURATION too."""
    timed = schedule(ROWS)
    assert schedule_problem(Path("t"), timed, 4096, 100.0) is None
    assert "line 2: input 10 + output 2 tokens cannot fit the model's max_model_len=11" in str(
        schedule_problem(Path("t"), timed, 11, 100.0))
    assert "lines 5-6 are 8 s apart" in str(schedule_problem(Path("t"), timed, None, 5.0))
    assert "no row is scheduled" in str(schedule_problem(Path("t"), [], None, 5.0))


def _trace_plan(
    tmp_path: Path, speed: float = 1.0, **knobs: Any
) -> tuple[Settings, Trace, list[tuple[float, TraceRow]], BenchmarkConfig]:
    """Settings, trace, schedule and plan of the Mooncake sample at ``speed`` with ``knobs``."""
    settings = Settings(trace=SAMPLES / "mooncake_sample.jsonl", trace_speed=speed, logs_dir=tmp_path, **knobs)
    trace = load_trace(SAMPLES / "mooncake_sample.jsonl")
    timed = schedule(trace.rows, speed, settings.requests, settings.duration)
    return settings, trace, timed, with_trace(bench_config(settings, "m"), settings, trace, timed)


def test_the_plan_replays_the_trace_in_the_open_loop(tmp_path: Path) -> None:
    """A trace plan is open loop at the schedule's mean rate, asks for the trace's output lengths exactly and
    records path, format, hash, speed and rows; without REQUESTS every row is replayed."""
    settings, trace, timed, traced = _trace_plan(tmp_path, 2.0)
    assert settings.requests is None and traced.requests == len(trace.rows) == traced.trace_rows
    assert traced.mode == "open_loop" and traced.rate_req_per_sec == pytest.approx(mean_rate([a for a, _ in timed]))
    assert traced.ignore_eos and traced.max_tokens == max(r.output_tokens for r in trace.rows)
    assert (traced.trace_format, traced.trace_sha256, traced.trace_speed) == (MOONCAKE, trace.sha256, 2.0)
    _, _, _, first = _trace_plan(tmp_path, requests=5)
    assert first.requests == first.trace_rows == 5


def test_the_trace_joins_the_fingerprint_only_when_set(tmp_path: Path) -> None:
    """Untraced runs keep their fingerprint fields; the trace's path (as the dataset), content, speed and rows each
    make another workload."""
    env = Environment()
    assert not {"trace_sha256", "trace_speed", "trace_rows"} & set(fingerprint_fields(plan(tmp_path), env))
    _, _, _, base = _trace_plan(tmp_path)
    fields = fingerprint_fields(base, env)
    assert fields["trace_sha256"] == base.trace_sha256 and fields["trace_rows"] == 32
    for change in ({"trace_speed": 2.0}, {"trace_rows": 5}, {"trace_sha256": "0" * 64}):
        assert fingerprint_fields(base.model_copy(update=change), env) != fields
    assert fields["dataset"] == "loadgen/workloads/data/traces/mooncake_sample.jsonl"  # the path, as any dataset's


@pytest.mark.parametrize("clash", [{"rate": 2.0}, {"rate_end": 3.0}, {"sweep": "auto"}, {"session_turns": 2},
                                   {"prefix_len": 64}, {"dataset": "random"}])
def test_trace_refuses_the_knobs_it_replaces(clash: dict[str, Any]) -> None:
    """TRACE with a rate, ramp, sweep, sessions, prefixes or generated prompts is refused, naming the clash."""
    with pytest.raises(ValidationError, match="replays the trace's own schedule"):
        Settings(trace=SAMPLES / "burstgpt_sample.csv", **clash)
    with pytest.raises(ValidationError):
        Settings(trace=SAMPLES / "burstgpt_sample.csv", trace_speed=0)


def test_locust_processes_split_the_one_trace_schedule(tmp_path: Path) -> None:
    """Each load process reads the prompts file and sends rows slot, slot + slots, ... at their times / speed; the
    processes together send every row once, request k being row k."""
    prompts = tmp_path / "trace.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"trace-{i}", "task": "trace", "prompt": f"p{i}", "max_tokens": i + 1,
                                           "at_s": 10.0 + 2 * i}) + "\n" for i in range(5)))
    traced = plan(tmp_path, trace_file="t.csv", trace_speed=2.0, dataset_file=str(prompts), rate_req_per_sec=1.0)
    assert [at for at, _ in trace_requests(traced)] == [0.0, 1.0, 2.0, 3.0, 4.0]
    state = RunState(traced, RequestLog(tmp_path / "log.jsonl"))
    parts = [list(arrivals(traced, Slot(i, 2), state.trace)) for i in range(2)]
    assert parts == [[(0, 0.0), (2, 2.0), (4, 4.0)], [(1, 1.0), (3, 3.0)]]
    items = [state.item(k) for k in range(5)]
    assert [(i.prompt.messages[0]["content"], i.max_tokens) for i in items] == [(f"p{k}", k + 1) for k in range(5)]


def test_rows_naming_the_same_block_start_with_the_same_tokens() -> None:
    """Mooncake hash ids: rows naming the same blocks start with the same 512 token ids each; their own tails
    differ; a row without ids is all its own."""
    pool = np.arange(100, 200)
    blocks: dict[int, list[int]] = {}
    a = row_ids(TraceRow(0, 1200, 1, (7, 8, 20)), 0, 3, pool, blocks, 1100)
    b = row_ids(TraceRow(0, 700, 1, (7, 21)), 1, 3, pool, blocks, 690)
    c = row_ids(TraceRow(0, 700, 1), 2, 3, pool, blocks, 690)
    assert len(a) == 1100 and len(b) == len(c) == 690
    assert a[:512] == b[:512] and a[512:1024] != b[512:1024] and c[:512] != a[:512]
    assert row_ids(TraceRow(0, 700, 1, (7, 21)), 1, 3, pool, {}, 690) == b  # seeded: the same ids every run


def test_prompts_are_exact_as_the_servers_tokenizer_counts_them() -> None:
    """A prompt built from a row's ids is exactly its input length as the server counts the chat (here the mock
    server's tokenizer, through httpx's in-process transport), whether the ids start too short or too long."""
    tok = ServerTokenizer("http://mock", "m")
    tok.client = httpx.Client(transport=httpx.MockTransport(
        lambda request: httpx.Response(200, content=tokenize_answer(request.url.path.encode(), request.content))))
    pool = np.arange(0x4E00, 0x4E80)
    rng = np.random.default_rng(1)
    for start, total in [(10, 50), (80, 50), (46, 50)]:
        text = exact_text(tok, pool, rng, [0x4E00 + i for i in range(start)], total, tok.chat_count, "TRACE")
        assert tok.chat_count(text) == total and text.startswith(chr(0x4E00) + chr(0x4E01))
