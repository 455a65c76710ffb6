"""A report keeps its run's rows file itself, not a copy: ``reports/<id>.requests.jsonl`` is a hard link to the
benchmark's ``logs/runs/<run id>.requests.jsonl`` (one file, two names), so the rows are on disk once and survive
a clean-up of ``logs/runs``.

The link is made only when it holds what the report would have written: the run's file exists under the runs folder,
holds exactly the rows the benchmark sent (or all of them when the body left them out, ``rows_omitted``) and masking
the sidecar's secrets would change nothing in it. Otherwise, and where the two folders are on different file systems
or mounts (``EXDEV``: compose's two bind mounts), the store writes the rows from the request as before. A report
written by earlier versions, with its own copy, reads the same: only the file's provenance differs.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable
from pathlib import Path

from core.api import BuildReportRequest

RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
"""A run id as the benchmark names its rows file (``YYYYMMDD_HHMMSS``): no path separators, no leading dot."""


def run_rows_file(runs_dir: Path, request: BuildReportRequest) -> Path | None:
    """The run's rows file when the report may keep it (see the module's docstring), else None.

    Reads the file once to count its rows (newlines of non-empty lines; nothing is parsed).
    """
    run_id = request.run_id
    if run_id is None or RUN_ID_RE.fullmatch(run_id) is None:
        return None
    path = runs_dir / f"{run_id}.requests.jsonl"
    try:
        if not path.is_file() or path.is_symlink():
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if data and not data.endswith(b"\n"):
        return None  # a torn last line: the report's rows would differ from the file
    rows = sum(1 for line in data.split(b"\n") if line.strip())
    if request.records and rows != len(request.records):
        return None
    if not request.records and (request.rows_omitted is None or rows == 0):
        return None
    return path


def link_rows(source: Path, target: Path, redact: Callable[[str], str]) -> bool | None:
    """Hard-link ``source`` as ``target``: True when linked, False when ``target`` exists (the id is taken), None
    when the rows cannot be kept this way (masking would change them, another file system, no such file): the
    caller then writes them."""
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if redact(text) != text:
        return None
    try:
        os.link(source, target)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno in (errno.EXDEV, errno.EPERM, errno.EACCES, errno.ENOENT, errno.EMLINK, errno.ENOTSUP):
            return None
        raise
    return True
