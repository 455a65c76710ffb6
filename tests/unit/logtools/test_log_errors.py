"""Warnings, errors and tracebacks from vLLM logs: recorded and generated, old and new formats, garbage, rotation."""

from __future__ import annotations

import gzip
import os
import time
from collections import Counter
from pathlib import Path

import pytest

from core.logfiles import rotated_family
from logtools.groups import ErrorEvent, ErrorGroups
from logtools.scan import LogScanner
from tests.synthlog import generate_current_log, generate_vllm_log
from tests.synthshapes import write_current_shapes

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "logs"
RECORDED = FIXTURES / "vllm_0.32_cpu_recorded.log"
FAILED = FIXTURES / "vllm_0.32_failed_start.log"
OLD = FIXTURES / "vllm_0.4_old_format.log"
ANSI = FIXTURES / "vllm_0.11_ansi_colour.log"
TP2_OOM = FIXTURES / "vllm_0.9_tp2_oom_rank1.log"
DOCKER_TP2 = FIXTURES / "vllm_0.11_docker_tp2_ready.log"
CRI_DEAD = FIXTURES / "vllm_0.11_k8s_cri_engine_dead.log"


def events_of(*paths: Path | str, block_bytes: int = 1 << 20, since_s: float | None = None) -> list[ErrorEvent]:
    events: list[ErrorEvent] = []
    LogScanner(on_event=events.append, since_s=since_s, block_bytes=block_bytes).scan(paths)
    return events


def summary_of(*paths: Path | str, block_bytes: int = 1 << 20) -> dict:
    groups = ErrorGroups()
    LogScanner(on_event=groups.add, block_bytes=block_bytes).scan(paths)
    return groups.summary(limit=100)


def test_recorded_cpu_log_warnings_are_grouped() -> None:
    """The recorded vLLM 0.32 CPU log has only warnings; repeats of one message (other pids) share a group."""
    summary = summary_of(RECORDED)
    assert summary["by_level"] == {"WARNING": 28}
    top = summary["groups"][0]
    assert (top["count"], top["source"]) == (6, "vllm.py:725")
    assert top["message"].startswith("Model Runner V2 requires Triton")
    kills = [g for g in summary["groups"] if "force killing remaining process EngineCore" in g["message"]]
    assert len(kills) == 1 and kills[0]["count"] == 2  # pid 5755 and pid 11279: one group


def test_launcher_warning_without_stamp_gets_the_time_of_the_line_before() -> None:
    """``[WARNING] ...`` from the launcher has no stamp; it is dated by the last stamped line before it."""
    launcher = [e for e in events_of(RECORDED) if e.message.startswith("default model baidu/ERNIE")]
    assert len(launcher) == 1 and launcher[0].source is None
    assert time.strftime("%H:%M:%S", time.localtime(launcher[0].stamp_s)) == "22:05:51"


def test_vllm_traceback_with_repeated_header_is_one_event() -> None:
    """vLLM prints the header on every traceback line: headline, frames and exception make one event."""
    events = events_of(FAILED)
    head = next(e for e in events if e.message == "EngineCore failed to start.")
    assert head.level == "ERROR" and head.source == "core.py:866" and head.process == "EngineCore"
    assert head.exception is not None and head.exception.startswith("ValueError: To serve at least one request")
    frames = head.traceback_text()
    assert frames[0] == "Traceback (most recent call last):" and any("kv_cache_utils.py" in f for f in frames)


def test_bare_prefixed_tracebacks_are_events_of_their_process() -> None:
    """Crashing processes print bare tracebacks behind ``(Proc pid=N)``; each is one event named by its exception."""
    bare = [e for e in events_of(FAILED) if e.source is None]
    assert [(e.process, e.message.split(":")[0]) for e in bare] == [
        ("EngineCore", "ValueError"),
        ("APIServer", "RuntimeError"),
    ]
    assert all(e.level == "ERROR" for e in bare)
    assert "Process EngineCore:" not in bare[0].traceback_text()


def test_old_format_chained_traceback_keeps_the_final_exception() -> None:
    """Old vLLM (``file.py:line]``, no prefix): a chained traceback is one event ending in the last exception."""
    events = events_of(OLD)
    engine = next(e for e in events if e.message == "Engine background task failed")
    assert engine.source == "async_llm_engine.py:61"
    assert engine.exception is not None and engine.exception.endswith("See stack trace above for the actual cause.")
    frames = engine.traceback_text()
    assert "The above exception was the direct cause of the following exception:" in frames
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in frames


def test_uvicorn_error_with_bare_traceback_is_one_event() -> None:
    """``ERROR:    Exception in ASGI application`` and the bare traceback after it are one event."""
    uvicorn = [e for e in events_of(OLD) if e.message == "Exception in ASGI application"]
    assert len(uvicorn) == 1
    assert (
        uvicorn[0].exception
        == "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already."
    )


@pytest.mark.parametrize("block_bytes", [3600, 4096, 5000])
def test_tracebacks_across_block_boundaries_stay_whole(block_bytes: int) -> None:
    """Blocks (longer than any line) that cut records anywhere give the same events as one big block."""
    for fixture in (FAILED, OLD, RECORDED):
        small = [
            (e.level, e.message, e.exception, len(e.traceback_raw)) for e in events_of(fixture, block_bytes=block_bytes)
        ]
        whole = [(e.level, e.message, e.exception, len(e.traceback_raw)) for e in events_of(fixture)]
        assert small == whole, fixture.name


@pytest.mark.parametrize("block_bytes", [500, 700, 1100])
def test_records_cut_by_small_blocks_stay_whole(block_bytes: int) -> None:
    """The short-lined fixtures read in blocks of a few lines still give whole tracebacks."""
    for fixture in (FAILED, OLD):
        small = [
            (e.level, e.message, e.exception, len(e.traceback_raw)) for e in events_of(fixture, block_bytes=block_bytes)
        ]
        whole = [(e.level, e.message, e.exception, len(e.traceback_raw)) for e in events_of(fixture)]
        assert small == whole, fixture.name


def test_generated_log_counts_match_ground_truth(tmp_path: Path) -> None:
    """On a generated log (old format, upgrade, crashes, restarts) every error and warning event is found once."""
    facts = generate_vllm_log(tmp_path / "vllm.log", n_lines=30_000, seed=3)
    events = events_of(tmp_path / "vllm.log", block_bytes=64 << 10)
    assert sum(e.level == "ERROR" for e in events) == facts.error_events
    assert sum(e.level == "WARNING" for e in events) == facts.warning_events
    kinds: dict[str, int] = {}
    for event in events:
        if event.exception:
            kind = event.exception.split(":")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
    assert kinds == facts.error_messages


def test_generated_log_groups_collapse_numbers_and_ids(tmp_path: Path) -> None:
    """Preemption warnings with different request ids and counters fall in one group."""
    facts = generate_vllm_log(tmp_path / "vllm.log", n_lines=20_000, seed=5)
    summary = summary_of(tmp_path / "vllm.log")
    preempted = [g for g in summary["groups"] if "is preempted" in g["message"]]
    assert len(preempted) == 1 and preempted[0]["count"] > 10
    assert summary["events"] == facts.error_events + facts.warning_events


def test_garbage_binary_and_overlong_lines_do_not_break_the_scan(tmp_path: Path) -> None:
    """NUL bytes, invalid UTF-8, a 3 MB line and a stray 'ERROR' inside INFO text give only the real events."""
    log = tmp_path / "vllm.log"
    log.write_bytes(
        b"\x00\x00\xff\xfe\x81 garbage ERROR WARNING \n"
        + b"(APIServer pid=1) INFO 11-29 21:55:01 [x.py:1] no ERROR here, CRITICAL neither\n"
        + b"Z" * (3 << 20)
        + b" ERROR at the end of a huge line\n"
        + b"(APIServer pid=1) ERROR 11-29 21:55:02 [serving.py:9] bad \xff\xfe bytes \x00 in message\n"
        + b"Traceback (most recent call last):\n"
        + b"\xff\xfe\n"
    )
    events = events_of(log)
    assert [e.message for e in events] == ["bad \ufffd\ufffd bytes \ufffd in message", "\ufffd\ufffd"]
    assert events[1].level == "ERROR" and events[1].traceback_text()[0] == "Traceback (most recent call last):"


def test_rotated_and_gzipped_files_are_read_oldest_first(tmp_path: Path) -> None:
    """Events of vllm.log.2.gz, vllm.log.1 and vllm.log come in that order."""
    (tmp_path / "vllm.log.2.gz").write_bytes(gzip.compress(b"ERROR 11-27 10:00:00 a.py:1] oldest\n"))
    (tmp_path / "vllm.log.1").write_bytes(b"ERROR 11-28 10:00:00 a.py:1] older\n")
    (tmp_path / "vllm.log").write_bytes(b"(APIServer pid=1) ERROR 11-29 10:00:00 [a.py:1] newest\n")
    events = events_of(*rotated_family(tmp_path / "vllm.log"))
    assert [e.message for e in events] == ["oldest", "older", "newest"]


def test_since_skips_old_files_and_old_lines(tmp_path: Path) -> None:
    """--since drops events stamped before it and does not open files last written before it."""
    old = tmp_path / "vllm.log.1"
    old.write_bytes(b"ERROR 11-27 10:00:00 a.py:1] from an old file\n")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    now = time.localtime()
    stamp_old = time.strftime("%m-%d %H:%M:%S", time.localtime(time.time() - 3600)).encode()
    stamp_new = time.strftime("%m-%d %H:%M:%S", now).encode()
    current = tmp_path / "vllm.log"
    current.write_bytes(
        b"(APIServer pid=1) ERROR "
        + stamp_old
        + b" [a.py:1] an hour ago\n"
        + b"(APIServer pid=1) WARNING "
        + stamp_new
        + b" [a.py:2] just now\n"
    )
    events: list[ErrorEvent] = []
    scanner = LogScanner(on_event=events.append, since_s=time.time() - 600)
    result = scanner.scan([old, current])
    assert [e.message for e in events] == ["just now"]
    assert result.skipped_files == [str(old)]


def test_traceback_found_among_many_b_letters(tmp_path: Path) -> None:
    """Logged prompt text full of 'b' (the letter the traceback search keys on) does not hide a traceback."""
    log = tmp_path / "vllm.log"
    chatter = b"INFO 11-29 21:55:01 [logger.py:1] Received request: prompt: 'a big bad bob bobs by' b b b\n" * 300
    crash = b'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nRuntimeError: boom\n'
    log.write_bytes(chatter + crash + chatter + crash)
    events = events_of(log)
    assert [e.message for e in events] == ["RuntimeError: boom", "RuntimeError: boom"]


def test_since_window_starts_inside_a_block_of_unstamped_lines(tmp_path: Path) -> None:
    """A block whose last 64 KiB have no stamp (only access lines) is still searched for the window's start."""
    log = tmp_path / "vllm.log"
    recent = time.strftime("%m-%d %H:%M:%S", time.localtime(time.time() - 60)).encode()
    access = b'INFO:     127.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n' * 2000
    log.write_bytes(b"(APIServer pid=1) ERROR " + recent + b" [a.py:1] recent, then quiet\n" + access)
    assert [e.message for e in events_of(log, since_s=time.time() - 600)] == ["recent, then quiet"]


@pytest.mark.parametrize("block_bytes", [1 << 20, 300])
def test_ansi_coloured_errors_are_found_and_grouped(block_bytes: int) -> None:
    """Two coloured ERROR records (with tracebacks) of one kind are 2 events in 1 group; the warning is counted."""
    summary = summary_of(ANSI, block_bytes=block_bytes)
    assert summary["by_level"] == {"ERROR": 2, "WARNING": 1} and summary["groups_total"] == 2
    top = summary["groups"][0]
    assert (top["level"], top["count"], top["source"], top["process"]) == ("ERROR", 2, "serving_chat.py:1145", "APIServer")
    assert top["message"] == "Error in chat completion stream generator."
    assert top["exception"].startswith("ValueError: This model's maximum context length is 32768 tokens.")
    assert "\x1b" not in top["first_seen"] + "".join(top["traceback"])


def test_tp2_worker_oom_is_an_event_of_that_worker() -> None:
    """TP=2 start, OOM on rank 1: the worker's record, the engine core's record and the two bare tracebacks."""
    summary = summary_of(TP2_OOM)
    assert summary["by_level"] == {"ERROR": 4, "WARNING": 1} and summary["groups_total"] == 5
    worker = next(g for g in summary["groups"] if g["process"] == "VllmWorker rank=1")
    assert worker["message"] == "WorkerProc failed to start." and worker["source"] == "multiproc_executor.py:546"
    assert worker["exception"].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB")
    bare = [g for g in summary["groups"] if g["source"] is None]
    assert {g["process"] for g in bare} == {"EngineCore_0", "APIServer"}


def test_docker_stamped_worker_warnings_share_a_group() -> None:
    """``docker logs -t`` lines of both TP workers: the same warning twice is one group of 2, dated by vLLM's stamp."""
    summary = summary_of(DOCKER_TP2)
    assert summary["by_level"] == {"WARNING": 2} and summary["groups_total"] == 1
    group = summary["groups"][0]
    assert group["count"] == 2 and group["message"].startswith("Custom allreduce is disabled")
    assert "T10:20:31" in group["first_seen"]


def test_kubernetes_cri_log_errors_with_tracebacks() -> None:
    """CRI-tagged lines: the engine core's fatal OOM and the API server's EngineDeadError are two events."""
    events = events_of(CRI_DEAD)
    assert [(e.level, e.process, e.message) for e in events] == [
        ("ERROR", "EngineCore_DP0", "EngineCore encountered a fatal error."),
        ("ERROR", "APIServer", "AsyncLLM output_handler failed."),
    ]
    assert events[0].exception is not None and events[0].exception.startswith("torch.OutOfMemoryError")
    assert events[1].exception is not None and "EngineDeadError" in events[1].exception


ARGPARSE = FIXTURES / "vllm_0.32_argparse_typo.log"


def test_argparse_error_line_is_an_error_event() -> None:
    """argparse's ``api_server.py: error: unrecognized arguments`` (no header) is counted, its program the source;
    with no stamped line before it, it has no time (not the file's or the analysis's)."""
    events = events_of(ARGPARSE)
    assert [(e.level, e.source, e.message) for e in events] == [
        ("ERROR", "api_server.py", "api_server.py: error: unrecognized arguments: --max-num-seqz")
    ]
    assert events[0].stamp_s is None
    assert summary_of(ARGPARSE)["groups"][0]["last_seen"] is None


def test_unstamped_line_is_dated_by_the_line_before_and_marked(tmp_path: Path) -> None:
    """A launcher line without a stamp gets the nearest stamped line's time, marked as such; none before: no time."""
    from logtools.render import render_errors

    log = tmp_path / "vllm.log"
    log.write_text(
        "[WARNING] Serving the synthetic stand-in\n"
        "INFO 11-29 21:55:01 [utils.py:253] non-default args: {}\n"
        "[WARNING] Serving the synthetic stand-in\n"
    )
    events = events_of(log)
    assert [e.stamp_before for e in events] == [True, True]
    assert events[0].stamp_s is None and events[1].stamp_s is not None
    assert time.strftime("%H:%M:%S", time.localtime(events[1].stamp_s)) == "21:55:01"
    os.utime(log, (time.time(), time.time()))
    summary = summary_of(log)
    group = summary["groups"][0]
    assert group["count"] == 2 and group["last_seen_from_line_before"] is True
    assert group["last_seen"].startswith("2026-11-29T21:55:01") or group["last_seen"][5:19] == "11-29T21:55:01"
    report = {"log": {"files": [str(log)]}, "events": 2, "groups_total": 1, "by_level": {"WARNING": 2}, **summary}
    text = "\n".join(render_errors(report))
    assert "21:55:01*" in text and "nearest stamped line before it" in text


@pytest.mark.parametrize(
    "shape", ["prefixes", "plain", "colours", "docker -t", "CRI", "CRI split", "CRLF", "rotated"]
)
def test_fast_path_counts_every_shape_exactly(tmp_path: Path, shape: str) -> None:
    """The literal-search fast path finds every planted error and warning, no more, in every shape the analyzer
    reads (today's prefixes, none, colours, container stamps, CRI partial lines, CRLF, a rotated pair)."""
    log = tmp_path / "vllm.log"
    facts = generate_current_log(log, n_lines=12_000, errors=25, seed=3)
    files = write_current_shapes(log)[shape]
    levels: Counter[str] = Counter()
    LogScanner(on_event=lambda event: levels.update([event.level])).scan(rotated_family(files[-1]))
    assert levels == {"ERROR": facts.error_events, "WARNING": facts.warning_events}
