"""The containers' log sink, a ``tee -a`` that rotates: ``python -m stack.logsink FILE [--max-mb N] [--backups K]``
copies its input to stdout and to ``FILE``, rotated as :mod:`core.logrotate` rotates the stack's own logs."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from core.logrotate import RotatingWriter
from core.units import MIB


def tee_main(argv: list[str] | None = None) -> int:
    """``python -m stack.logsink FILE [--max-mb N] [--backups K]``: copy stdin to stdout and to ``FILE``,
    rotated, where no supervisord writes a container's log (``exec python -m ui.chainlit_launch > >(exec python -m
    stack.logsink /app/logs/ui.log) 2>&1``). Writes whole lines (one over 1 MiB in pieces); 0 at the end of input."""
    parser = argparse.ArgumentParser(prog="python -m stack.logsink", description=tee_main.__doc__)
    parser.add_argument("file", type=Path)
    parser.add_argument("--max-mb", type=float, default=10.0, help="rotate at this size, MiB")
    parser.add_argument("--backups", type=int, default=3, help="rotated files kept")
    args = parser.parse_args(argv)
    writer = RotatingWriter(args.file, int(args.max_mb * MIB), args.backups)
    out = sys.stdout.buffer
    try:
        for line in iter(lambda: sys.stdin.buffer.readline(MIB), b""):
            with contextlib.suppress(OSError):
                out.write(line)
                out.flush()
            writer.write(line)
    finally:
        writer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(tee_main())
