"""Named baselines: ``reports/baselines.json`` maps a name (``v0.2.1``) to a report or series id; later reports are
compared with each (``comparison.vs_v0.2.1``) and ``make benchmark GATE=v0.2.1`` gates on that."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from core.atomicfile import atomic_write
from core.parsing import validate_name
from core.report_schema import Report
from core.series_stats import is_series_id
from sidecar.reports.store import ReportStore, validate_report_id

log = logging.getLogger(__name__)
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
