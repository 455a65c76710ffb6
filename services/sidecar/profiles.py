"""Copy vLLM's profiler traces into ``reports/profile/<run id>/`` so a report links to its own evidence."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from core.report_schema import ProfileInfo

RUN_ID_RE = re.compile(r"^[0-9]{8}_[0-9]{6}(?:_\d+)?$")
OPEN_WITH = "chrome://tracing or https://ui.perfetto.dev (open the .json.gz directly)"


def collect_traces(traces: list[str], source_dir: Path, reports_dir: Path, run_id: str) -> ProfileInfo | None:
    """Copy ``traces`` (files under ``source_dir``) to ``reports_dir/profile/run_id/``; None when there are none.

    Raises:
        ValueError: an invalid run id, or a trace path outside ``source_dir`` (only vLLM's profile folder is read).
    """
    if not traces:
        return None
    if not RUN_ID_RE.match(run_id):
        raise ValueError(f"{run_id!r} is not a run id (YYYYMMDD_HHMMSS)")
    root = source_dir.resolve()
    target = reports_dir / "profile" / run_id
    target.mkdir(parents=True, exist_ok=True)
    copied = []
    for trace in traces:
        path = Path(trace).resolve()
        if not path.is_relative_to(root):
            raise ValueError(f"trace {trace} is outside the profile folder {root}")
        shutil.copy2(path, target / path.name)
        copied.append(path.name)
    return ProfileInfo(dir=str(target.relative_to(reports_dir)), files=sorted(copied), open_with=OPEN_WITH)
