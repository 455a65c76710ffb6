"""The ``reports/`` folder: one store for reports, series and comparisons, with atomic no-clobber writes (the JSON
last, so a crash leaves nothing the listing shows) and a tolerant listing (corrupt files are skipped); report
retention: ``REPORTS_KEEP`` newest reports and ``REPORTS_MAX_AGE_DAYS`` (by ``timestamp``), never named baselines or
files that are no reports; and the named baselines: ``reports/baselines.json`` maps a name (``v0.2.1``) to a report or
series id; later reports are compared with each (``comparison.vs_v0.2.1``) and ``make benchmark GATE=v0.2.1`` gates on
that."""

from __future__ import annotations

import builtins
import json
import logging
import math
import os
import re
import shutil
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from core.atomicfile import atomic_write, temp_beside
from core.parsing import validate_name
from core.redact import redact_json
from core.report_schema import Report
from core.series_stats import is_series_id
from sidecar.reports.rows_link import RunRows, link_rows

log = logging.getLogger(__name__)
Model = TypeVar("Model", bound=BaseModel)
REPORT_ID_RE = re.compile(r"benchmark_report_[0-9]{8}_[0-9]{6}(?:_[0-9]{1,4})?")  # fullmatch: no trailing newline
DAY_S = 86_400.0


def new_id(prefix: str, now: datetime | None = None) -> str:
    """``<prefix>_YYYYMMDD_HHMMSS`` in local time (the seed's naming)."""
    return f"{prefix}_{(now or datetime.now()).strftime('%Y%m%d_%H%M%S')}"


def validate_report_id(report_id: str) -> str:
    """``report_id`` when it is a report name (no paths). Raises ValueError: anything else."""
    if not isinstance(report_id, str) or not REPORT_ID_RE.fullmatch(report_id):
        raise ValueError(f"{report_id!r} is not a report id (benchmark_report_YYYYMMDD_HHMMSS)")
    return report_id


def _write_new(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically; False (and nothing written) when ``path`` already exists."""
    tmp = temp_beside(path, data)
    try:
        try:
            os.link(tmp, path)  # fails if it exists: two builds in one second never clobber each other
        except FileExistsError:
            return False
        return True
    finally:
        os.unlink(tmp)


Render = Callable[[Any], dict[str, str]]
"""The files beside a result's JSON, ``{".md": text, ".html": text}``, from its final version."""
RESULT_ATTACHMENTS: dict[str, str | None] = {".md": "markdown_file", ".html": "html_file"}
"""A series' and a comparison's attachments: suffix -> the field naming the file."""
ATTACHMENT_FIELDS: dict[str, str | None] = {**RESULT_ATTACHMENTS, ".csv": "csv_file", ".summary.csv": None}
"""A report's attachments (the summary CSV has no field of its own)."""


class ResultStore(Generic[Model]):
    """Files ``<prefix>_YYYYMMDD_HHMMSS[_n].json`` of one pydantic type under ``root``.

    Args:
        id_field: the model's id field (``report_id``, ``series_id``, ``compare_id``); ``id_re`` validates ids.
        attachments: suffix -> the model's field naming that file (None: no field).
        redact: applied to every string of the JSON and rows and to the whole text of the attachments.
    """

    def __init__(
        self,
        root: Path,
        model: type[Model],
        prefix: str,
        id_field: str,
        id_re: re.Pattern[str],
        redact: Callable[[str], str] | None = None,
        attachments: dict[str, str | None] = RESULT_ATTACHMENTS,
    ) -> None:
        self.root = root
        self.model = model
        self.prefix = prefix
        self.id_field = id_field
        self.id_re = id_re
        self.attachments = attachments
        self._redact = redact or (lambda text: text)

    def validate_id(self, result_id: str) -> str:
        """``result_id`` when it is one of this store's ids (no paths). Raises ValueError: anything else."""
        if not isinstance(result_id, str) or not self.id_re.fullmatch(result_id):  # whole: no trailing newline
            raise ValueError(f"{result_id!r} is not an id of the form {self.prefix}_YYYYMMDD_HHMMSS")
        return result_id

    def _json_line(self, line: str) -> str:
        """One JSON document with its strings redacted (a line that is not JSON is redacted as text)."""
        try:
            data = json.loads(line)
        except ValueError:
            return self._redact(line)
        return json.dumps(redact_json(data, self._redact), ensure_ascii=False)

    def write(self, result: Model, render: Render | None = None, rows: RunRows | None = None) -> Path:
        """Write ``result`` under its id (``_2``, ``_3`` ... when taken): its ``rows`` first (hard-linked when masking
        changes nothing), the files ``render`` makes, the JSON last; returns the JSON's path. Raises OSError: the folder
        is not writable (nothing of this result stays behind)."""
        self.root.mkdir(parents=True, exist_ok=True)
        link = rows is not None and self._redact(rows.text) == rows.text
        base = str(getattr(result, self.id_field))
        for n in range(1, 1000):
            result_id = base if n == 1 else f"{base}_{n}"
            written: list[Path] = []
            path = None
            try:
                if rows is not None:
                    target = self.root / f"{result_id}.requests.jsonl"
                    linked = link_rows(rows.path, target) if link else None
                    if linked is False:  # the name is taken
                        continue
                    if linked is None:
                        link = False  # written from the text read from now on
                        data = "".join(self._json_line(line) + "\n" for line in rows.text.splitlines() if line.strip())
                        if not _write_new(target, data.encode("utf-8")):
                            continue
                    written.append(target)
                path = self._write_rest(result, result_id, render, rows is not None, written)
            finally:
                if path is None:  # a name was taken, or the write failed: nothing of this try stays
                    for leftover in written:
                        leftover.unlink(missing_ok=True)
            if path is not None:
                return path
        raise RuntimeError(f"could not find a free {self.prefix} id")

    def _write_rest(
        self, result: Model, result_id: str, render: Render | None, has_rows: bool, written: list[Path]
    ) -> Path | None:
        """Attachments then the JSON under ``result_id``; None when one of the names is taken."""
        names = {suffix: f"{result_id}{suffix}" for suffix in self.attachments} if render else {}
        update: dict[str, str | None] = {self.id_field: result_id}
        if has_rows:
            update["requests_file"] = f"{result_id}.requests.jsonl"
        update.update({field: names.get(suffix) for suffix, field in self.attachments.items() if field})
        final = result.model_copy(update=update)
        extra = render(final) if render else {}
        for suffix, text in extra.items():
            if not _write_new(self.root / names[suffix], self._redact(text).encode("utf-8")):
                return None
            written.append(self.root / names[suffix])
        missing = {field: None for suffix, field in self.attachments.items() if field and suffix not in extra}
        final = final.model_copy(update=missing)
        path = self.root / f"{result_id}.json"
        body = redact_json(final.model_dump(mode="json"), self._redact)
        if not _write_new(path, (json.dumps(body, indent=2, ensure_ascii=False) + "\n").encode("utf-8")):
            return None
        return path

    def get(self, result_id: str) -> Model:
        """One result by id. Raises ValueError: invalid id. FileNotFoundError: no such result."""
        path = self.root / f"{self.validate_id(result_id)}.json"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise FileNotFoundError(f"no {self.prefix.removeprefix('benchmark_')} {result_id}") from None
        return self.model.model_validate_json(data)

    def list(self) -> builtins.list[Model]:
        """Every valid result, oldest first (by id, which is its time); corrupt or foreign files are skipped."""
        out = []
        for path in sorted(self.root.glob(f"{self.prefix}_*.json")):
            try:
                out.append(self.model.model_validate_json(path.read_bytes()))
            except (OSError, ValueError, ValidationError) as exc:
                log.warning("skipping %s: not a valid %s (%s)", path.name, self.prefix, str(exc).splitlines()[0])
        return out


class ReportStore(ResultStore[Report]):
    """The store of one-run reports (``benchmark_report_*``), listed by when the run ended."""

    def __init__(self, root: Path, redact: Callable[[str], str] | None = None) -> None:
        super().__init__(root, Report, "benchmark_report", "report_id", REPORT_ID_RE, redact, ATTACHMENT_FIELDS)

    def list(self) -> builtins.list[Report]:
        """All valid reports, oldest run first; corrupt or foreign JSON files are skipped with a warning."""
        return sorted(super().list(), key=lambda r: (r.run_ended_at, r.report_id))

    def validate_id(self, result_id: str) -> str:
        """:func:`validate_report_id`."""
        return validate_report_id(result_id)

    def files_of(self, report_id: str) -> builtins.list[Path]:
        """The files of report ``report_id`` that exist: its JSON first, then its rows and attachments. Raises
        ValueError: invalid id."""
        validate_report_id(report_id)
        names = [f"{report_id}.json", f"{report_id}.requests.jsonl", *(report_id + s for s in ATTACHMENT_FIELDS)]
        return [self.root / name for name in names if (self.root / name).is_file()]

    def delete(self, report: Report) -> builtins.list[Path]:
        """Remove ``report``: its JSON first, then its rows, attachments and profiler traces; returns what went. Raises
        ValueError: invalid id."""
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


def utc_now_iso() -> str:
    """Current UTC time, ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Retention:
    """How many reports to keep (0: all) and the oldest age kept, days (None: no limit)."""

    keep: int
    max_age_days: float | None = None


def written_at_s(report: Report) -> float:
    """When ``report`` was written, Unix seconds (its ``timestamp``; the run's end when that does not parse)."""
    try:
        return datetime.fromisoformat(report.timestamp).timestamp()
    except ValueError:
        return report.run_ended_at


def expired(reports: list[Report], protected: Collection[str], rule: Retention, now_s: float) -> list[Report]:
    """The reports ``rule`` removes, oldest first, never one whose id is in ``protected``."""
    ordered = sorted(reports, key=lambda r: (written_at_s(r), r.report_id))
    surplus = len(ordered) - rule.keep if rule.keep > 0 else 0
    cutoff = -math.inf if rule.max_age_days is None else now_s - rule.max_age_days * DAY_S
    return [r for i, r in enumerate(ordered)
            if (i < surplus or written_at_s(r) < cutoff) and r.report_id not in protected]  # fmt: skip


def prune(store: ReportStore, protected: Collection[str], rule: Retention, now_s: float) -> list[str]:
    """Remove the reports :func:`expired` names; returns their ids (never raises: failures are logged)."""
    removed = []
    for report in expired(store.list(), protected, rule, now_s):
        try:
            store.delete(report)
        except (OSError, ValueError) as exc:
            log.warning("retention: could not remove %s: %s", report.report_id, exc)
            continue
        removed.append(report.report_id)
    if removed:
        log.info("retention removed %d report(s): %s", len(removed), ", ".join(removed))
    return removed


RESERVED_NAMES = frozenset({"previous"})
FILE_NAME = "baselines.json"


def validate_baseline_target(result_id: str) -> str:
    """``result_id`` when it is a report or series id. Raises ValueError: neither a report id nor a series id."""
    return result_id if is_series_id(result_id) else validate_report_id(result_id)


def validate_baseline_name(name: str) -> str:
    """Return ``name`` when it is a usable baseline name (:func:`core.parsing.validate_name`, not ``previous``). Raises
    ValueError: anything else; the message says what is allowed."""
    validate_name(name)
    if name in RESERVED_NAMES:
        raise ValueError(f"{name!r} is reserved (it names the comparison with the previous run); choose another name")
    return name


class BaselineStore:
    """Reads and atomically rewrites ``<reports>/baselines.json`` (serialised within the sidecar process)."""

    def __init__(self, root: Path) -> None:
        self.path = root / FILE_NAME
        self._lock = threading.Lock()

    def all(self) -> dict[str, str]:
        """Every valid ``name -> report id``; a corrupt file or entry is skipped with a warning (never raises)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("ignoring %s: unreadable (%s)", self.path, exc)
            return {}
        if not isinstance(data, dict):
            log.warning("ignoring %s: not a JSON object", self.path)
            return {}
        out = {}
        for name, report_id in data.items():
            try:
                out[validate_baseline_name(str(name))] = validate_baseline_target(str(report_id))
            except ValueError as exc:
                log.warning("ignoring baseline entry in %s: %s", self.path, exc)
        return dict(sorted(out.items()))

    def _save(self, baselines: dict[str, str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, (json.dumps(dict(sorted(baselines.items())), indent=2) + "\n").encode())

    def set(self, name: str, report_id: str) -> str | None:
        """Point ``name`` at ``report_id``; returns the id it pointed at before (None: a new name). Raises ValueError:
        invalid name or id."""
        validate_baseline_name(name)
        validate_baseline_target(report_id)
        with self._lock:
            baselines = self.all()
            previous = baselines.get(name)
            baselines[name] = report_id
            self._save(baselines)
        return previous

    def remove(self, name: str) -> bool:
        """Forget ``name``; False when it was not set. Raises ValueError: invalid name."""
        validate_baseline_name(name)
        with self._lock:
            baselines = self.all()
            if baselines.pop(name, None) is None:
                return False
            self._save(baselines)
            return True

    def resolve(self, reports: ReportStore) -> dict[str, Report | str]:
        """Each baseline's report, or why it cannot be used (deleted or corrupt report)."""
        out: dict[str, Report | str] = {}
        for name, report_id in self.all().items():
            if is_series_id(report_id):
                out[name] = (
                    f"it is the series {report_id}: a series baseline judges series runs (REPEAT>=2 or SWEEP, "
                    "with intervals); `python -m loadgen.command.benchmark --gate NAME` switches to one by itself"
                )
                continue
            try:
                out[name] = reports.get(report_id)
            except FileNotFoundError:
                out[name] = f"its report {report_id} no longer exists"
            except (OSError, ValueError) as exc:
                out[name] = f"its report {report_id} is unreadable ({str(exc).splitlines()[0]})"
        return out
