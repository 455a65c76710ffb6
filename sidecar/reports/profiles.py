"""Copy vLLM's profiler traces into ``reports/profile/<run id>/`` so a report links to its own evidence."""

from __future__ import annotations

import shutil
from pathlib import Path

from core.api import RUN_ID_RE
from core.report_schema import ProfileInfo

OPEN_WITH = "chrome://tracing or https://ui.perfetto.dev (open the .json.gz directly)"


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
