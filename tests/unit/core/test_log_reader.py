"""Streaming reads of log files: rotation order, gzip, block boundaries, over-long and half-written lines."""

from __future__ import annotations

import gzip
import os
import threading
from pathlib import Path

from core.logfiles import ReadStats, iter_blocks, iter_spans, rotated_family


def lines_of(path: Path, block_bytes: int = 1 << 20) -> tuple[list[bytes], ReadStats]:
    stats = ReadStats()
    lines: list[bytes] = []
    for buf, start, end in iter_spans(path, stats, block_bytes):
        chunk = buf[start:end]
        assert chunk.endswith(b"\n")
        lines += chunk.split(b"\n")[:-1]
    return lines, stats


def test_rotated_family_is_oldest_first(tmp_path: Path) -> None:
    """vllm.log.3.gz, .2, .1 come before vllm.log; unrelated files are left out."""
    for name in ("vllm.log", "vllm.log.1", "vllm.log.2", "vllm.log.3.gz", "vllm.log.bak", "other.log.1"):
        (tmp_path / name).write_text("x\n")
    names = [Path(p).name for p in rotated_family(tmp_path / "vllm.log")]
    assert names == ["vllm.log.3.gz", "vllm.log.2", "vllm.log.1", "vllm.log"]


def test_rotated_family_without_current_file(tmp_path: Path) -> None:
    """Only rotated files left (vllm.log not yet re-created): they are still found; nothing at all gives []."""
    (tmp_path / "vllm.log.1").write_text("x\n")
    assert [Path(p).name for p in rotated_family(tmp_path / "vllm.log")] == ["vllm.log.1"]
    assert rotated_family(tmp_path / "none.log") == []


def test_gzip_is_detected_by_content_not_name(tmp_path: Path) -> None:
    """A gzip file is decompressed whatever its name; a plain file named .gz is read as is."""
    packed = tmp_path / "vllm.log.1"
    packed.write_bytes(gzip.compress(b"one\ntwo\n"))
    plain = tmp_path / "vllm.log.2.gz"
    plain.write_bytes(b"three\n")
    assert lines_of(packed)[0] == [b"one", b"two"]
    assert lines_of(plain)[0] == [b"three"]


def test_truncated_gzip_keeps_what_was_readable(tmp_path: Path) -> None:
    """A cut gzip stream yields its readable lines and notes the problem instead of raising."""
    data = gzip.compress(b"".join(b"line %d\n" % i for i in range(20000)))
    cut = tmp_path / "vllm.log.2.gz"
    cut.write_bytes(data[: len(data) // 2])
    lines, stats = lines_of(cut, block_bytes=4096)
    assert lines and lines[0] == b"line 0"
    assert len(stats.problems) == 1 and "vllm.log.2.gz" in stats.problems[0]


def test_block_boundaries_do_not_change_lines(tmp_path: Path) -> None:
    """Small blocks (longer than any line) give the lines of one big read, also a last line without newline."""
    text = b"".join(b"%d " % i + b"x" * (i % 37) + b"\n" for i in range(500)) + b"tail without newline"
    log = tmp_path / "vllm.log"
    log.write_bytes(text)
    expected = text.split(b"\n")
    for block_bytes in (48, 64, 1000, 1 << 20):
        assert lines_of(log, block_bytes)[0] == expected, block_bytes


def test_overlong_line_is_cut_and_counted(tmp_path: Path) -> None:
    """A line longer than a block is cut to one block; the lines after it are intact."""
    log = tmp_path / "vllm.log"
    log.write_bytes(b"before\n" + b"A" * 5000 + b"\nafter\n")
    lines, stats = lines_of(log, block_bytes=1024)
    assert lines[0] == b"before" and lines[-1] == b"after"
    assert len(lines) == 3 and lines[1] == b"A" * 1024
    assert stats.overlong_lines == 1


def test_binary_garbage_is_passed_through(tmp_path: Path) -> None:
    """NUL bytes and invalid UTF-8 are lines like any other (nothing is decoded while reading)."""
    log = tmp_path / "vllm.log"
    log.write_bytes(b"\x00\x01\xff\xfe\n\x80abc\n")
    assert lines_of(log)[0] == [b"\x00\x01\xff\xfe", b"\x80abc"]


def test_half_written_last_line_is_skipped_when_the_file_grows(tmp_path: Path) -> None:
    """Reading stops at the size seen at open; a last line still being written is not yielded."""
    log = tmp_path / "vllm.log"
    log.write_bytes(b"first\nsecond\nthird is be")
    stats = ReadStats()
    spans = iter_spans(log, stats, block_bytes=16)
    got = [next(spans)]
    with log.open("ab") as out:  # the writer goes on while we read
        out.write(b"ing written\nfourth\n")
    got += list(spans)
    lines = b"".join(buf[start:end] for buf, start, end in got).split(b"\n")[:-1]
    assert lines == [b"first", b"second"]
    assert stats.partial_lines_skipped == 1


def test_last_line_without_newline_is_kept_when_file_is_still(tmp_path: Path) -> None:
    """A file that did not grow keeps its unterminated last line."""
    log = tmp_path / "vllm.log"
    log.write_bytes(b"a\nb")
    assert list(iter_blocks(log, ReadStats())) == [b"a\n", b"b\n"]


def test_reading_while_another_thread_appends(tmp_path: Path) -> None:
    """A writer appending lines during reads never makes the reader fail or yield a torn line."""
    log = tmp_path / "vllm.log"
    log.write_bytes(b"")
    done = threading.Event()

    def writer() -> None:
        with log.open("ab", buffering=0) as out:
            for i in range(3000):
                out.write(b"INFO 11-29 21:55:01 [x.py:1] line %05d end\n" % i)
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    seen = 0
    while not done.is_set() or seen == 0:
        lines, _ = lines_of(log, block_bytes=512)
        assert all(line.endswith(b" end") for line in lines)
        seen = len(lines)
    thread.join()
    assert lines_of(log)[0][-1].endswith(b"02999 end")


def test_unreadable_file_is_a_problem_not_an_exception(tmp_path: Path) -> None:
    """A file that cannot be opened is reported in ``problems``."""
    stats = ReadStats()
    assert list(iter_spans(tmp_path / "missing.log", stats)) == []
    assert stats.problems and "missing.log" in stats.problems[0]
    assert not os.path.exists(tmp_path / "missing.log")


def test_file_truncated_while_being_read_is_reported(tmp_path: Path) -> None:
    """copytruncate rotation mid-read: the lines read so far are kept, the file is listed as shrunk with a problem."""
    log = tmp_path / "requests.jsonl"
    log.write_bytes(b"".join(b"line %05d\n" % i for i in range(2000)))  # 22,000 bytes
    stats = ReadStats()
    spans = iter_spans(log, stats, block_bytes=4096)
    first = next(spans)
    os.truncate(log, 0)  # logrotate's copytruncate between two reads
    rest = list(spans)
    lines = b"".join(buf[start:end] for buf, start, end in [first, *rest]).split(b"\n")[:-1]
    assert lines[0] == b"line 00000" and len(lines) < 2000 and all(len(line) == 10 for line in lines)
    assert stats.shrunk_files == [str(log)]
    assert len(stats.problems) == 1 and "shrank while being read" in stats.problems[0]


def test_unchanged_file_is_not_reported_as_shrunk(tmp_path: Path) -> None:
    """Reading a still file to its end notes nothing."""
    log = tmp_path / "vllm.log"
    log.write_bytes(b"x\n" * 10_000)
    lines, stats = lines_of(log, block_bytes=4096)
    assert len(lines) == 10_000 and stats.shrunk_files == [] and stats.problems == []


def test_last_bytes_reads_the_tail_from_a_whole_line(tmp_path: Path) -> None:
    """``last_bytes`` starts at the first whole line of the tail (also when the cut falls on a line start)."""
    log = tmp_path / "vllm.log"
    log.write_bytes(b"".join(b"line %05d\n" % i for i in range(1000)))  # 11 bytes a line
    for last_bytes, first in ((55, b"line 00995"), (60, b"line 00995"), (11, b"line 00999")):
        stats = ReadStats()
        lines = b"".join(buf[s:e] for buf, s, e in iter_spans(log, stats, last_bytes=last_bytes)).split(b"\n")[:-1]
        assert lines[0] == first and lines[-1] == b"line 00999", last_bytes
        assert stats.bytes_read <= last_bytes + 1
    assert len(lines_of(log)[0]) == 1000
