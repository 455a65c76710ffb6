"""The ``reports/`` folder: atomic, no-clobber writes and a tolerant listing (corrupt files are skipped).

A report is written as its rows, its Markdown and HTML, then its JSON last, each through a temporary dot-file that
is hard-linked into place: a crash at any point leaves at most orphan dot-files or files without a JSON, which the
listing never shows.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from core.redact import redact_json
from core.report_schema import Report
from sidecar.reports.rows_link import link_rows

log = logging.getLogger(__name__)
REPORT_ID_RE = re.compile(r"benchmark_report_[0-9]{8}_[0-9]{6}(?:_[0-9]{1,4})?")
"""A report id, matched whole (``fullmatch``: ``$`` would let a trailing newline through)."""
FILE_MODE = 0o644  # mkstemp creates 0600; reports are meant to be read by people and CI


def new_report_id(now: datetime | None = None) -> str:
    """``benchmark_report_YYYYMMDD_HHMMSS`` in local time (the seed's naming)."""
    return f"benchmark_report_{(now or datetime.now()).strftime('%Y%m%d_%H%M%S')}"


def validate_report_id(report_id: str) -> str:
    """Return ``report_id`` when it is a report name; no paths, no traversal.

    Raises:
        ValueError: anything else.
    """
    if not isinstance(report_id, str) or not REPORT_ID_RE.fullmatch(report_id):
        raise ValueError(f"{report_id!r} is not a report id (benchmark_report_YYYYMMDD_HHMMSS)")
    return report_id


def _temp_beside(path: Path, data: bytes) -> str:
    """``data`` written and fsynced to a hidden temp file in ``path``'s folder (mode 0644); returns its path."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, FILE_MODE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def atomic_replace(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (temp file in the same folder, fsync, rename)."""
    tmp = _temp_beside(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_new(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically; False (and nothing written) when ``path`` already exists."""
    tmp = _temp_beside(path, data)
    try:
        try:
            os.link(tmp, path)  # fails if it exists: two builds in one second never clobber each other
        except FileExistsError:
            return False
        return True
    finally:
        os.unlink(tmp)


Attachments = Callable[[Report], dict[str, str]]
"""Renders the files written next to a report, ``{".md": text, ".html": text}``, from its final version."""
ATTACHMENT_FIELDS: dict[str, str | None] = {
    ".md": "markdown_file",
    ".html": "html_file",
    ".csv": "csv_file",
    ".summary.csv": None,  # named after the rows CSV; no field of its own
}


class ReportStore:
    """Reads and writes reports under ``root``; ``redact`` is applied to every file written: to each string value of
    the JSON and of the rows (so masking never breaks a document) and to the whole text of the attachments."""

    def __init__(self, root: Path, redact: Callable[[str], str] | None = None) -> None:
        self.root = root
        self._redact = redact or (lambda text: text)

    def _bytes(self, text: str) -> bytes:
        return self._redact(text).encode("utf-8")

    def _json_line(self, line: str) -> str:
        """One JSON document with its strings redacted (a line that is not JSON is redacted as text)."""
        try:
            data = json.loads(line)
        except ValueError:
            return self._redact(line)
        return json.dumps(redact_json(data, self._redact), ensure_ascii=False)

    def _report_bytes(self, report: Report) -> bytes:
        data = redact_json(report.model_dump(mode="json"), self._redact)
        return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")

    def write(
        self,
        report: Report,
        records_jsonl: Iterable[str],
        attachments: Attachments | None = None,
        rows_from: Path | None = None,
    ) -> Path:
        """Write ``report``, its per-request rows and its attachments under a fresh id; returns the JSON's path.

        The id is ``report.report_id`` or, when taken, the same with ``_2``, ``_3`` … appended. Rows go first (the
        id is reserved by them), the JSON last: a reader that sees the report always finds everything beside it.
        ``rows_from`` (the run's rows file, :func:`sidecar.reports.rows_link.run_rows_file`) is kept as the rows
        (a hard link, no copy) when it can be; else the rows are written from ``records_jsonl``.

        Raises:
            OSError: the folder is not writable; nothing of this report stays behind.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        rows: bytes | None = None
        base = report.report_id
        for n in range(1, 1000):
            report_id = base if n == 1 else f"{base}_{n}"
            requests_name = f"{report_id}.requests.jsonl"
            linked = link_rows(rows_from, self.root / requests_name, self._redact) if rows_from else None
            if linked is False:
                continue
            if linked is None:
                rows_from = None  # written from the request from now on
                if rows is None:
                    rows = "".join(self._json_line(line) + "\n" for line in records_jsonl).encode("utf-8")
                if not _write_new(self.root / requests_name, rows):
                    continue
            written = [self.root / requests_name]
            try:
                path = self._write_rest(report, report_id, attachments, written)
            except BaseException:
                for leftover in written:
                    leftover.unlink(missing_ok=True)
                raise
            if path is not None:
                return path
            for leftover in written:
                leftover.unlink(missing_ok=True)
        raise RuntimeError("could not find a free report id")

    def _write_rest(
        self, report: Report, report_id: str, attachments: Attachments | None, written: list[Path]
    ) -> Path | None:
        """Attachments then the JSON under ``report_id``; None when one of the names is taken."""
        names = {suffix: f"{report_id}{suffix}" for suffix in ATTACHMENT_FIELDS} if attachments else {}
        update: dict[str, str | None] = {"report_id": report_id, "requests_file": f"{report_id}.requests.jsonl"}
        update.update({field: names.get(suffix) for suffix, field in ATTACHMENT_FIELDS.items() if field})
        final = report.model_copy(update=update)
        extra = attachments(final) if attachments else {}
        for suffix, text in extra.items():
            if not _write_new(self.root / names[suffix], self._bytes(text)):
                return None
            written.append(self.root / names[suffix])
        missing = {field: None for suffix, field in ATTACHMENT_FIELDS.items() if field and suffix not in extra}
        final = final.model_copy(update=missing)
        path = self.root / f"{report_id}.json"
        if not _write_new(path, self._report_bytes(final)):
            return None
        return path

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

    def files_of(self, report_id: str) -> builtins.list[Path]:
        """Every file of report ``report_id``: its JSON first, then its rows and attachments (those that exist).

        Raises:
            ValueError: invalid id.
        """
        validate_report_id(report_id)
        names = [f"{report_id}.json", f"{report_id}.requests.jsonl", *(report_id + s for s in ATTACHMENT_FIELDS)]
        return [self.root / name for name in names if (self.root / name).is_file()]

    def delete(self, report: Report) -> builtins.list[Path]:
        """Remove ``report``: its JSON first (the listing stops showing it at once), then its rows, attachments and
        profiler traces (``reports/profile/<run>/``); returns what was removed.

        Raises:
            ValueError: invalid id.
        """
        removed = []
        for path in self.files_of(report.report_id):
            path.unlink(missing_ok=True)
            removed.append(path)
        if report.profile is not None:
            folder = (self.root / report.profile.dir).resolve()
            if folder.is_relative_to((self.root / "profile").resolve()) and folder.is_dir():
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
        return removed

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
