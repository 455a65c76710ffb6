"""The ``reports/`` folder: atomic, no-clobber writes and a tolerant listing (corrupt files are skipped)."""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from services.report_schema import Report

log = logging.getLogger(__name__)
REPORT_ID_RE = re.compile(r"^benchmark_report_\d{8}_\d{6}(?:_\d+)?$")


def new_report_id(now: datetime | None = None) -> str:
    """``benchmark_report_YYYYMMDD_HHMMSS`` in local time (the seed's naming)."""
    return f"benchmark_report_{(now or datetime.now()).strftime('%Y%m%d_%H%M%S')}"


def validate_report_id(report_id: str) -> str:
    """Return ``report_id`` when it is a report name; no paths, no traversal.

    Raises:
        ValueError: anything else.
    """
    if not REPORT_ID_RE.match(report_id):
        raise ValueError(f"{report_id!r} is not a report id (benchmark_report_YYYYMMDD_HHMMSS)")
    return report_id


def _write_new(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically; False (and nothing written) when ``path`` already exists."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)  # fails if it exists: two builds in one second never clobber each other
        except FileExistsError:
            return False
        return True
    finally:
        os.unlink(tmp)


class ReportStore:
    """Reads and writes reports under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, report: Report, records_jsonl: Iterable[str]) -> Path:
        """Write ``report`` (and its per-request rows) under a fresh id; returns the JSON's path.

        The id is ``report.report_id`` or, when taken, the same with ``_2``, ``_3`` … appended.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        rows = "".join(line + "\n" for line in records_jsonl).encode("utf-8")
        base = report.report_id
        for n in range(1, 1000):
            report_id = base if n == 1 else f"{base}_{n}"
            path = self.root / f"{report_id}.json"
            requests_name = f"{report_id}.requests.jsonl"
            final = report.model_copy(update={"report_id": report_id, "requests_file": requests_name})
            # Rows first: a reader that sees the report always finds its rows.
            if not _write_new(self.root / requests_name, rows):
                continue
            if _write_new(path, final.model_dump_json(indent=2).encode("utf-8")):
                return path
            (self.root / requests_name).unlink(missing_ok=True)
        raise RuntimeError("could not find a free report id")

    def list(self) -> list[Report]:
        """All valid reports, oldest first; corrupt or foreign JSON files are skipped with a warning."""
        reports = []
        for path in sorted(self.root.glob("benchmark_report_*.json")):
            try:
                reports.append(Report.model_validate_json(path.read_bytes()))
            except (OSError, ValueError, ValidationError) as exc:
                log.warning("skipping %s: not a valid report (%s)", path.name, str(exc).splitlines()[0])
        reports.sort(key=lambda r: (r.run_ended_at, r.report_id))
        return reports

    def get(self, report_id: str) -> Report:
        """One report by id.

        Raises:
            ValueError: invalid id. FileNotFoundError: no such report.
        """
        path = self.root / f"{validate_report_id(report_id)}.json"
        return Report.model_validate_json(path.read_bytes())


def utc_now_iso() -> str:
    """Current UTC time, ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def dump_records(rows: Iterable[object]) -> list[str]:
    """JSON lines of pydantic rows (``model_dump_json``) or plain objects."""
    out = []
    for row in rows:
        dump = getattr(row, "model_dump_json", None)
        out.append(dump() if dump else json.dumps(row, ensure_ascii=False))
    return out
