"""Streaming reads of log files in blocks of whole lines, in constant memory.

Handles rotated siblings (``vllm.log.2.gz``, ``vllm.log.1``, ``vllm.log``: oldest first), gzip (by magic bytes, not
by name; a truncated stream keeps what was readable), over-long lines (cut at one block), files being appended to
(read up to the size seen at open; a half-written last line is skipped) and files truncated while being read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

BLOCK_BYTES = 1 << 20
"""Bytes read per block (1 MiB: two passes over a block stay in the CPU cache); also the longest line kept whole
(longer lines are cut to this many bytes)."""

GZIP_MAGIC = b"\x1f\x8b"
_ROTATED_RE = re.compile(r"^(?P<base>.+?)\.(?P<n>\d+)(?:\.gz)?$|^(?P<gzbase>.+?)\.gz$")


@dataclass
class ReadStats:
    """What reading found besides the lines: files, bytes, cut or skipped lines and problems (one line each)."""

    files: list[str] = field(default_factory=list)
    bytes_read: int = 0
    overlong_lines: int = 0
    partial_lines_skipped: int = 0
    problems: list[str] = field(default_factory=list)


def rotated_family(path: Path) -> list[Path]:
    """Existing files of ``path``'s rotation family, oldest first, ``path`` itself last.

    ``vllm.log`` -> ``[vllm.log.3.gz, vllm.log.2, vllm.log.1, vllm.log.gz?, vllm.log]`` (only those that exist).
    A path that is itself a rotated file (``vllm.log.1``) is returned alone.
    """
    if _ROTATED_RE.match(path.name):
        return [path] if path.exists() else []
    numbered: list[tuple[int, Path]] = []
    plain_gz: list[Path] = []
    try:
        siblings = list(path.parent.iterdir())
    except OSError:
        siblings = []
    prefix = path.name + "."
    for sibling in siblings:
        rest = sibling.name[len(prefix) :] if sibling.name.startswith(prefix) else None
        if rest is None or not sibling.is_file():
            continue
        number = rest.removesuffix(".gz")
        if number.isdigit():
            numbered.append((int(number), sibling))
        elif rest == "gz":
            plain_gz.append(sibling)
    family = [p for _, p in sorted(numbered, key=lambda item: -item[0])] + plain_gz
    if path.is_file():
        family.append(path)
    return family


def _open(path: Path, stats: ReadStats) -> tuple[BinaryIO, int | None, int | None]:
    """Open ``path`` for reading: (stream, byte limit for plain files, file descriptor for plain files)."""
    raw = path.open("rb")
    head = raw.read(2)
    raw.seek(0)
    if head == GZIP_MAGIC:
        import gzip

        return gzip.GzipFile(fileobj=raw, mode="rb"), None, None  # type: ignore[return-value]
    fd = raw.fileno()
    return raw, os.fstat(fd).st_size, fd


def iter_blocks(path: Path, stats: ReadStats, block_bytes: int = BLOCK_BYTES) -> Iterator[bytes]:
    """Yield ``path``'s content as blocks of complete lines, each ending with ``b"\\n"``.

    A line longer than ``block_bytes`` may be cut to its first ``block_bytes`` (counted in ``stats.overlong_lines``); memory
    stays within two blocks. A plain file
    is read up to its size at open; a last line without newline is yielded unless the file grew meanwhile (then it is
    being written and is counted in ``stats.partial_lines_skipped``). Read errors and corrupt gzip end the file and
    are noted in ``stats.problems``; nothing is raised for bad content.
    """
    try:
        stream, limit_bytes, fd = _open(path, stats)
    except OSError as exc:
        stats.problems.append(f"{path}: cannot read ({exc.strerror or exc})")
        return
    stats.files.append(str(path))
    carry = b""
    skipping = False  # inside the rest of an over-long line
    remaining = limit_bytes
    with stream:
        while True:
            want = block_bytes if remaining is None else min(block_bytes, remaining)
            if want <= 0:
                break
            try:
                data = stream.read(want)
            except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError; EOFError: truncated stream
                stats.problems.append(f"{path}: stopped reading after {stats.bytes_read} bytes ({exc})")
                break
            if not data:
                break
            stats.bytes_read += len(data)
            if remaining is not None:
                remaining -= len(data)
            if skipping:
                newline = data.find(b"\n")
                if newline < 0:
                    continue
                data = data[newline + 1 :]
                skipping = False
            cut = data.rfind(b"\n") + 1
            if cut == 0:  # no line ends in this read
                carry += data
                if len(carry) >= block_bytes:
                    stats.overlong_lines += 1
                    skipping = True
                    yield carry[:block_bytes] + b"\n"
                    carry = b""
                continue
            if carry:  # one copy: the carried start of a line joined with the whole lines read now
                block = b"".join((carry, memoryview(data)[:cut]))
            else:
                block = data if cut == len(data) else data[:cut]
            carry = data[cut:]
            yield block
        if carry and not skipping:
            if fd is not None and limit_bytes is not None and _size(fd) > limit_bytes:
                stats.partial_lines_skipped += 1
            else:
                yield carry + b"\n"


def _size(fd: int) -> int:
    """Current size of an open file in bytes (0 when it cannot be asked)."""
    try:
        return os.fstat(fd).st_size
    except OSError:
        return 0


def mtime_s(path: Path) -> float | None:
    """Modification time of ``path`` (epoch seconds), None when it cannot be read."""
    try:
        return path.stat().st_mtime
    except OSError:
        return None
