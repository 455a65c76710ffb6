"""Bounded logs: requests.jsonl rotated safely under concurrent writers (read back whole by the analyzer), the vLLM
log writer's rotation, and start-up facts read from a bounded part of a big log."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

from core.enginestate import EngineState, log_position
from core.logfiles import ReadStats, rotated_family
from core.logrotate import RotatingWriter, append_rotating, lock_path, rotate
from core.requestlog import RequestLog, RequestLogLine
from engine.vllmlog import startup
from engine.vllmlog.startup import read_startup, startup_phase
from logtools.aggregate import RequestsRead, iter_records

STARTUP = (
    "[INFO] Starting vLLM: python -m vllm.entrypoints.openai.api_server --model m\n"
    "(APIServer pid=1) INFO 11-29 21:55:01 [utils.py:253] vLLM API server version 0.32.0\n"
    "(EngineCore pid=2) INFO 11-29 21:55:03 [default_loader.py:1] Loading weights took 1.50 seconds\n"
    "(EngineCore pid=2) INFO 11-29 21:55:20 [core.py:1] init engine (profile, create kv cache, warmup model) took "
    "17.00 seconds\n"
    "(APIServer pid=1) INFO 11-29 21:55:30 [api_server.py:1] Starting vLLM server on http://127.0.0.1:8100\n"
)
SERVING = '(APIServer pid=1) INFO:     127.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'


def line(i: int) -> RequestLogLine:
    return RequestLogLine(ts="2026-01-01T00:00:00.000+00:00", source="loadtest", request_id=f"w{i}", model="m",
                          prompt_tokens=1, completion_tokens=2, ttft_ms=3.0, total_ms=4.0, status="ok")  # fmt: skip


def writer(path: str, worker: int, count: int) -> None:
    log = RequestLog(Path(path), max_bytes=8_000, backups=50)
    for i in range(count):
        log.append(line(worker * 100_000 + i))


def test_requests_log_rotates_under_concurrent_writers_and_loses_nothing(tmp_path: Path) -> None:
    """Four processes appending at once through a small limit: every line is in exactly one file of the family,
    whole, no file grows far past the limit, and the analyzer reads them all back."""
    path = tmp_path / "requests.jsonl"
    procs = [multiprocessing.Process(target=writer, args=(str(path), w, 400)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    family = rotated_family(path)
    assert len(family) > 5 and not lock_path(path).name.startswith(path.name)
    ids = [json.loads(x)["request_id"] for f in family for x in Path(f).read_text().splitlines()]
    assert sorted(ids) == sorted(f"w{w * 100_000 + i}" for w in range(4) for i in range(400))
    assert max(os.path.getsize(f) for f in family) < 8_000 + 4 * 300  # a few lines raced past the check at most
    read = RequestsRead()
    assert sum(1 for _ in iter_records(rotated_family(path), read)) == 1600 and read.bad_lines == 0


def test_rotation_keeps_at_most_the_backups(tmp_path: Path) -> None:
    """Old files beyond REQUESTS_LOG_BACKUPS are dropped, newest first in .1; renames keep the inode."""
    path = tmp_path / "x.log"
    for i in range(6):
        append_rotating(path, f"{i}\n".encode() * 10, max_bytes=25, backups=3)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["x.log", "x.log.1",
                                                                                      "x.log.2", "x.log.3"]
    assert path.read_text().startswith("5") and (tmp_path / "x.log.3").read_text().startswith("2")
    inode = path.stat().st_ino
    rotate(path, 3)
    assert (tmp_path / "x.log.1").stat().st_ino == inode and not path.exists()


def test_vllm_log_writer_rotates_at_its_size(tmp_path: Path) -> None:
    """The launcher's writer (VLLM_LOG_TO_FILE) rotates between writes and keeps VLLM_LOG_BACKUPS files."""
    path = tmp_path / "vllm.log"
    out = RotatingWriter(path, max_bytes=1000, backups=2)
    for i in range(50):
        out.write(f"line {i:03d} {'x' * 90}\n".encode())
    out.close()
    family = rotated_family(path)
    assert [Path(f).name for f in family] == ["vllm.log.2", "vllm.log.1", "vllm.log"]
    assert all(os.path.getsize(f) <= 1000 for f in family)
    assert path.read_text().splitlines()[-1].startswith("line 049")


def held_writer(path: str, worker: int, count: int) -> None:
    """A Locust process's writer: one descriptor held for the whole run (:meth:`RequestLog.writer`)."""
    log = RequestLog(Path(path), max_bytes=8_000, backups=50)
    out = log.writer()
    try:
        for i in range(count):
            out.write(log.encode(line(worker * 100_000 + i)))
    finally:
        out.close()


def test_held_descriptors_rotate_once_and_lose_nothing(tmp_path: Path) -> None:
    """Four processes each holding a descriptor, plus the UI-style appends of :meth:`RequestLog.append`, through a
    small limit: a writer whose file another one rotated reopens the new file instead of rotating it again, so no
    file of the family is a near-empty leftover and every line is in exactly one file."""
    path = tmp_path / "requests.jsonl"
    procs = [multiprocessing.Process(target=held_writer, args=(str(path), w, 400)) for w in range(3)]
    procs.append(multiprocessing.Process(target=writer, args=(str(path), 3, 400)))
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    family = rotated_family(path)
    ids = [json.loads(x)["request_id"] for f in family for x in Path(f).read_text().splitlines()]
    assert sorted(ids) == sorted(f"w{w * 100_000 + i}" for w in range(4) for i in range(400))
    sizes = [os.path.getsize(f) for f in family[:-1]]  # the newest file may still be filling
    assert max(sizes) < 8_000 + 4 * 300 and min(sizes) > 8_000 // 2, sizes  # rotated when full, never twice


def big_log(path: Path, serving_mb: int, before: str = "") -> None:
    """``before``, a start-up, then ``serving_mb`` MiB of access lines (written in blocks)."""
    with path.open("w") as fh:
        fh.write(before + STARTUP)
        block = SERVING * ((1 << 20) // len(SERVING))
        for _ in range(serving_mb):
            fh.write(block)


def test_startup_of_a_big_log_reads_a_bounded_part(tmp_path: Path) -> None:
    """A 24 MiB log: the phase, timings and version are those of a whole read, from at most ~4 MiB read."""
    path = tmp_path / "vllm.log"
    big_log(path, 24)
    stats = ReadStats()
    bounded = read_startup(path, None, stats)
    full = startup_phase(path)
    assert bounded.phase == full.phase == "ready"
    assert (bounded.load_s, bounded.engine_init_s, bounded.vllm_version) == (1.5, 17.0, "0.32.0")
    assert stats.bytes_read <= startup.REGION_BYTES + startup.TAIL_BYTES + 2 * (1 << 20)


def test_latest_launch_is_found_from_the_engine_state_after_rotation(tmp_path: Path) -> None:
    """Two launches far apart in a big log, the second recorded in engine_state (device, inode, offset): its facts
    are read, also after the file was rotated to vllm.log.1 and a new vllm.log begun."""
    path = tmp_path / "vllm.log"
    big_log(path, 12)
    position = log_position(path)
    assert position is not None
    second = STARTUP.replace("1.50 seconds", "4.25 seconds").replace("17.00", "9.00")
    with path.open("a") as fh:
        fh.write(second)
        fh.write(SERVING * 100_000)
    state = EngineState(requested="m", source="s", model_arg="m", served_name="m", log_start=position)
    stats = ReadStats()
    phase = read_startup(path, state, stats)
    assert (phase.phase, phase.load_s, phase.engine_init_s) == ("ready", 4.25, 9.0)
    assert len(phase.attempts) == 2 and stats.bytes_read < 5 << 20
    rotate(path, 3)
    path.write_text(SERVING * 10)
    phase = read_startup(path, state)
    assert (phase.phase, phase.load_s) == ("ready", 4.25)
    assert startup_phase(path).phase == "not_started"  # the old whole-file reader would not see it


def test_launch_near_the_head_keeps_the_cold_start(tmp_path: Path) -> None:
    """A recorded launch inside the first MiB is read in one region with the cold start before it."""
    path = tmp_path / "vllm.log"
    path.write_text(STARTUP + SERVING * 12)
    position = log_position(path)
    with path.open("a") as fh:
        fh.write(STARTUP.replace("1.50 seconds", "4.25 seconds"))
        fh.write(SERVING * 120_000)
    state = EngineState(requested="m", source="s", model_arg="m", served_name="m", log_start=position)
    phase = read_startup(path, state)
    assert [a.load_s for a in phase.attempts] == [1.5, 4.25] and phase.phase == "ready"


def test_fatal_error_after_ready_is_seen_in_the_tail(tmp_path: Path) -> None:
    """A dead engine at the end of a big log turns the phase to failed (the tail is always read)."""
    path = tmp_path / "vllm.log"
    big_log(path, 10)
    with path.open("a") as fh:
        fh.write("(APIServer pid=1) ERROR 11-29 23:00:00 [core.py:1] EngineDeadError: engine loop has died\n")
    assert read_startup(path).phase == "failed"


def test_small_family_is_read_whole_with_its_rotated_files(tmp_path: Path) -> None:
    """Below FULL_READ_BYTES every file of the family counts: the cold start in vllm.log.1, a restart in vllm.log."""
    (tmp_path / "vllm.log.1").write_text(STARTUP + SERVING)
    (tmp_path / "vllm.log").write_text(STARTUP.replace("1.50", "2.00"))
    phase = read_startup(tmp_path / "vllm.log")
    assert len(phase.attempts) == 2 and phase.load_s == 2.0


def test_rotating_tee_for_containers(tmp_path: Path) -> None:
    """``python -m stack.logsink FILE`` (the containers' replacement for ``tee -a``) passes its input through and
    keeps FILE rotated."""
    import subprocess
    import sys

    data = "".join(f"line {i:04d} {'x' * 60}\n" for i in range(200)).encode()
    run = subprocess.run([sys.executable, "-m", "stack.logsink", str(tmp_path / "ui.log"), "--max-mb", "0.002",
                          "--backups", "2"], input=data, capture_output=True, timeout=60)  # fmt: skip
    assert run.returncode == 0 and run.stdout == data
    family = rotated_family(tmp_path / "ui.log")
    assert [Path(f).name for f in family] == ["ui.log.2", "ui.log.1", "ui.log"]
    assert all(os.path.getsize(f) <= 0.002 * (1 << 20) for f in family)
    assert b"".join(Path(f).read_bytes() for f in family) == data[-sum(os.path.getsize(f) for f in family):]
