"""Streaming reads of log files as spans of whole lines, in constant memory: rotated siblings (oldest first),
gzip by magic bytes, over-long lines, files being appended to, and files shrinking while read.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO

StrPath = str | os.PathLike[str]
"""A file path as ``str`` or ``pathlib.Path`` (pathlib itself is not imported: start-up time counts)."""

BLOCK_BYTES = 1 << 20
"""Bytes read at a time (1 MiB: several passes over a block stay in the CPU cache); lines longer than this may be cut
to their first ``BLOCK_BYTES``."""
GZIP_MAGIC = b"\x1f\x8b"

Span = tuple[bytes, int, int]
"""``(buffer, start, end)``: ``buffer[start:end]`` holds whole lines, each ending with ``b"\\n"``."""


class ReadStats:
    """What reading found besides the lines: files, bytes, cut or skipped lines and problems (one line each)."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self.bytes_read = 0
        self.overlong_lines = 0
        self.partial_lines_skipped = 0
        self.shrunk_files: list[str] = []
        """Plain files that became shorter than their size at open while being read (truncated, copytruncate)."""
        self.problems: list[str] = []


def rotated_family(path: StrPath) -> list[str]:
    """Existing files of ``path``'s rotation family, oldest first, ``path`` last."""
    path = os.fspath(path)
    folder, name = os.path.split(path)
    numbered: list[tuple[int, str]] = []
    plain_gz: list[str] = []
    try:
        siblings = os.listdir(folder or ".")
    except OSError:
        siblings = []
    prefix = name + "."
    for sibling in siblings:
        full = os.path.join(folder, sibling)
        if not sibling.startswith(prefix) or not os.path.isfile(full):
            continue
        rest = sibling[len(prefix) :]
        number = rest.removesuffix(".gz")
        if number.isdigit():
            numbered.append((int(number), full))
        elif rest == "gz":
            plain_gz.append(full)
    family = [p for _, p in sorted(numbered, key=lambda item: -item[0])] + plain_gz
    if os.path.isfile(path):
        family.append(path)
    return family


def _open(path: StrPath) -> tuple[BinaryIO, int | None, int | None]:
    """Open ``path`` for reading: (stream, byte limit for plain files, file descriptor for plain files)."""
    raw = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by the caller's with-block
    try:
        is_gzip = raw.read(2) == GZIP_MAGIC
        raw.seek(0)
        if is_gzip:
            import gzip

            return gzip.GzipFile(fileobj=raw, mode="rb"), None, None  # type: ignore[return-value]
        fd = raw.fileno()
        return raw, os.fstat(fd).st_size, fd
    except BaseException:
        raw.close()
        raise


def iter_spans(
    path: StrPath,
    stats: ReadStats,
    block_bytes: int = BLOCK_BYTES,
    last_bytes: int | None = None,
    start_at: int | None = None,
) -> Generator[Span, None, None]:
    """Yield ``path``'s content as spans of complete lines, oldest first, in about two blocks of memory.

    A plain file is read up to its size at open (a growing file's half-written last line is skipped); a shrinking
    file ends where it shrank; a line over ``block_bytes`` is cut; read errors and corrupt gzip end the file. All are
    counted in ``stats``; nothing is raised for bad content.

    Args:
        last_bytes: read only about the last this many bytes of a plain file, from its first whole line.
        start_at: read a plain file from the first whole line at or after this byte (ignored with ``last_bytes``).
    """
    try:
        stream, limit_bytes, fd = _open(path)
    except OSError as exc:
        stats.problems.append(f"{path}: cannot read ({exc.strerror or exc})")
        return
    stats.files.append(os.fspath(path))
    carry = b""  # the start of a line continued in the next read
    skipping = False  # inside the rest of an over-long line
    remaining = limit_bytes
    got = 0
    shrunk = False
    if last_bytes is not None and limit_bytes is not None and limit_bytes > last_bytes:
        stream.seek(limit_bytes - last_bytes - 1)  # from the byte before: a newline there means a whole first line
        remaining, skipping = last_bytes + 1, True
    elif start_at and limit_bytes is not None:
        begin = min(start_at, limit_bytes)
        stream.seek(begin - 1)  # from the byte before, as above
        remaining, skipping = limit_bytes - begin + 1, True
    with stream:
        while remaining is None or remaining > 0:
            try:
                data = stream.read(block_bytes if remaining is None else min(block_bytes, remaining))
            except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError; EOFError: truncated stream
                stats.problems.append(f"{path}: stopped reading after {stats.bytes_read} bytes ({exc})")
                break
            if not data:
                if remaining is not None and fd is not None:  # the file ended before its size at open
                    shrunk = True
                    stats.shrunk_files.append(os.fspath(path))
                    stats.problems.append(
                        f"{path}: shrank while being read (was {limit_bytes} bytes, now {_size(fd)}; truncated or "
                        f"rotated in place): {got} bytes read, the rest is lost"
                    )
                break
            got += len(data)
            stats.bytes_read += len(data)
            if remaining is not None:
                remaining -= len(data)
            start = 0
            if skipping or carry:
                first_end = data.find(b"\n") + 1
                if first_end == 0:  # still no end of that line: all of the block is carried (or skipped)
                    start = len(data) if skipping else 0
                else:
                    if not skipping:
                        joined = carry + data[:first_end]
                        if len(joined) > block_bytes:
                            stats.overlong_lines += 1
                            joined = joined[:block_bytes] + b"\n"
                        yield joined, 0, len(joined)
                    carry, skipping, start = b"", False, first_end
            cut = data.rfind(b"\n", start) + 1
            if cut > start:
                yield data, start, cut
                carry = data[cut:]
            else:  # carry is empty here unless the block continues it
                carry += data[start:]
            if len(carry) >= block_bytes:
                stats.overlong_lines += 1
                yield carry[:block_bytes] + b"\n", 0, block_bytes + 1
                carry, skipping = b"", True
        if carry:
            if shrunk or (fd is not None and limit_bytes is not None and _size(fd) > limit_bytes):
                stats.partial_lines_skipped += 1
            else:
                yield carry + b"\n", 0, len(carry) + 1


def iter_blocks(path: StrPath, stats: ReadStats, block_bytes: int = BLOCK_BYTES) -> Iterator[bytes]:
    """Like :func:`iter_spans`, as ``bytes`` blocks of whole lines (a copy when a span is part of its buffer)."""
    for buf, start, end in iter_spans(path, stats, block_bytes):
        yield buf if start == 0 and end == len(buf) else buf[start:end]


def _size(fd: int) -> int:
    """Current size of an open file in bytes (0 when it cannot be asked)."""
    try:
        return os.fstat(fd).st_size
    except OSError:
        return 0


def mtime_s(path: StrPath) -> float | None:
    """Modification time of ``path`` (epoch seconds), None when it cannot be read."""
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def log_tail(path: StrPath, lines: int = 15, missing: str = "(no log)") -> str:
    """The last ``lines`` lines of a log file (for error messages); ``missing`` when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return "\n".join(file.read().splitlines()[-lines:])
    except OSError:
        return missing
