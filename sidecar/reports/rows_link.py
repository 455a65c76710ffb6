"""A run's files: its rows, read once from the benchmark's ``<LOGS_DIR>/runs/<run id>.requests.jsonl`` (never over
HTTP; the report's ``reports/<id>.requests.jsonl`` is a hard link to it, or the text written where no link can be
made), and vLLM's profiler traces, copied into ``reports/profile/<run id>/`` so a report links to its own evidence."""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from core.api import RUN_ID_RE
from core.records import RequestRecord
from core.report_schema import ProfileInfo

OPEN_WITH = "chrome://tracing or https://ui.perfetto.dev (open the .json.gz directly)"


@dataclass(frozen=True)
class RunRows:
    """One run's rows file as read once: path, text and the rows parsed (unreadable lines skipped)."""

    path: Path
    text: str
    records: list[RequestRecord]


def rows_file(runs_dir: Path, run_id: str) -> Path:
    """The rows file of run ``run_id`` in ``runs_dir``, checked to be a regular file but not read. Raises ValueError:
    no run id (``YYYYMMDD_HHMMSS``; 400). FileNotFoundError: no such regular file (422)."""
    if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id):
        raise ValueError(f"run_id {run_id!r} is not a run id (YYYYMMDD_HHMMSS, the name of a rows file in logs/runs)")
    path = runs_dir / f"{run_id}.requests.jsonl"
    if path.is_symlink() or not path.is_file():
        raise FileNotFoundError(
            f"no rows file {path}: the sidecar reads the benchmark's rows from its own LOGS_DIR/runs "
            f"({runs_dir}), so the benchmark's logs folder (LOGS_DIR, --logs-dir) must be that folder"
        )
    return path


def read_run_rows(runs_dir: Path, run_id: str) -> RunRows:
    """The rows of run ``run_id`` from ``runs_dir`` (:func:`rows_file`), read once. Raises ValueError: ``run_id`` is no
    run id (the sidecar answers 400: nothing is read). FileNotFoundError: no such rows file, or one holding no request
    row (the sidecar answers 422)."""
    path = rows_file(runs_dir, run_id)
    where = f"{path} (the sidecar reads the benchmark's rows from its LOGS_DIR/runs: both must share logs/)"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise FileNotFoundError(f"cannot read {where}: {exc}") from None
    records: list[RequestRecord] = []
    for line in text.splitlines():
        if line.strip():
            try:
                records.append(RequestRecord.model_validate_json(line))
            except ValueError:
                continue
    if not records:
        raise FileNotFoundError(f"no request row in {path}: nothing to report")
    return RunRows(path, text, records)


def link_rows(source: Path, target: Path) -> bool | None:
    """Hard-link ``source`` as ``target``: True linked, False ``target`` exists, None the file system cannot."""
    try:
        os.link(source, target)
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno in (errno.EXDEV, errno.EPERM, errno.EACCES, errno.ENOENT, errno.EMLINK, errno.ENOTSUP):
            return None
        raise
    return True


def trace_paths(traces: list[str], source_dir: Path, run_id: str | None) -> list[Path]:
    """The resolved paths of ``traces``, checked to be files inside ``source_dir`` (nothing is read). Raises ValueError:
    a bad run id, or a trace that is not a file of ``source_dir`` (the sidecar answers 400)."""
    if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id):
        raise ValueError(f"{run_id!r} is not a run id (YYYYMMDD_HHMMSS)")
    root = source_dir.resolve()
    paths = []
    for trace in traces:
        try:
            path = Path(trace).resolve()
        except (OSError, ValueError, RuntimeError) as exc:  # a NUL byte, a symlink loop
            raise ValueError(f"trace {trace!r} is not a usable path ({exc})") from None
        if not path.is_relative_to(root):
            raise ValueError(f"trace {trace!r} is outside the profile folder {root}")
        if not path.is_file():
            raise ValueError(f"trace {trace!r} is not a file in the profile folder {root}")
        paths.append(path)
    return paths


def collect_traces(traces: list[str], source_dir: Path, reports_dir: Path, run_id: str) -> ProfileInfo | None:
    """Copy ``traces`` (checked first: :func:`trace_paths`) to ``reports_dir/profile/run_id/``; None without any. Raises
    ValueError: an invalid run id, a trace outside ``source_dir``, or the copy failed (the sidecar answers 400)."""
    if not traces:
        return None
    paths = trace_paths(traces, source_dir, run_id)
    target = reports_dir / "profile" / run_id
    copied = []
    try:
        target.mkdir(parents=True, exist_ok=True)
        for path in paths:
            shutil.copy2(path, target / path.name)
            copied.append(path.name)
    except OSError as exc:
        raise ValueError(f"cannot copy the traces into {target}: {exc}") from None
    return ProfileInfo(dir=str(target.relative_to(reports_dir)), files=sorted(copied), open_with=OPEN_WITH)
