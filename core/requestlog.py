"""``logs/requests.jsonl``: one line per chat request (chat UI and load tests), read by the log analyzer.

:class:`RequestLogLine` is the one line type: ``ts``, ``source``, ``request_id``, ``model``, token counts, ``ttft_ms``,
``total_ms``, ``status``, ``error`` (and ``run_id``). One ``write`` per line; rotated at REQUESTS_LOG_MAX_MB.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from core.logrotate import RotatingWriter, append_rotating
from core.parsing import iso_to_epoch_s
from core.units import MIB

if TYPE_CHECKING:  # the analyzer imports this module and must start fast: no pydantic at import
    from core.records import RequestRecord
    from core.settings import Settings

Status = Literal["ok", "error", "cancelled"]
STATUSES = ("ok", "error", "cancelled")


class BadLogLine(ValueError):
    """A line that is not a valid ``requests.jsonl`` record; the message says why."""


def now_iso() -> str:
    """Current UTC time, ISO 8601 with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass(slots=True)
class RequestLogLine:
    """One line of ``logs/requests.jsonl``. ``end_s`` is ``ts`` in epoch seconds (not written)."""

    ts: str
    source: str
    request_id: str
    model: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    ttft_ms: float | None
    total_ms: float | None
    status: Status
    error: str | None = None
    end_s: float = field(default=math.nan, repr=False, compare=False)
    run_id: str | None = None
    """The benchmark run whose rows file holds this request's row (``logs/runs/<run_id>.requests.jsonl``, found by
    ``request_id``); None for the UI and for runs without a rows file. Written only when set."""

    def __post_init__(self) -> None:
        if math.isnan(self.end_s):
            self.end_s = iso_to_epoch_s(self.ts)

    @property
    def start_s(self) -> float:
        """When the request began, epoch seconds (``end_s`` less ``total_ms`` when known)."""
        return self.end_s - (self.total_ms or 0.0) / 1000.0

    def as_dict(self) -> dict[str, Any]:
        """The line as written (``run_id`` only when set)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("end_s", "run_id")}
        return out | ({"run_id": self.run_id} if self.run_id is not None else {})

    @classmethod
    def parse(cls, raw: bytes | str) -> RequestLogLine:
        """One line of the file as a record.

        Raises:
            BadLogLine: not JSON, not an object, a missing or mistyped field, or an unparsable ``ts``.
        """
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise BadLogLine(f"not JSON ({exc.__class__.__name__})") from None
        if not isinstance(obj, dict):
            raise BadLogLine(f"a JSON {type(obj).__name__}, expected an object")
        ts = _field(obj, "ts", str, required=True)
        try:
            end_s = iso_to_epoch_s(ts)
        except ValueError:
            raise BadLogLine(f"ts {ts[:40]!r} is not an ISO 8601 time") from None
        status = obj.get("status")
        if status not in STATUSES:
            raise BadLogLine(f"status is {status!r}, expected one of {', '.join(STATUSES)}")
        return cls(
            ts=ts,
            source=_field(obj, "source", str) or "unknown",
            request_id=_field(obj, "request_id", str) or "",
            model=_field(obj, "model", str),
            prompt_tokens=_field(obj, "prompt_tokens", int),
            completion_tokens=_field(obj, "completion_tokens", int),
            ttft_ms=_field(obj, "ttft_ms", float),
            total_ms=_field(obj, "total_ms", float),
            status=status,
            error=_field(obj, "error", str),
            end_s=end_s,
            run_id=_field(obj, "run_id", str),
        )

    @classmethod
    def from_record(
        cls, record: RequestRecord, source: str, model: str | None, run_id: str | None = None
    ) -> RequestLogLine:
        """The line of a timed request row, linked by ``run_id`` and ``request_id``."""
        return cls(
            ts=now_iso(),
            source=source,
            request_id=record.request_id,
            model=model or None,
            prompt_tokens=record.prompt_tokens,
            completion_tokens=record.output_tokens,
            ttft_ms=record.ttft_ms,
            total_ms=record.e2e_ms,
            status="ok" if record.ok else "cancelled" if record.error_kind == "incomplete" else "error",
            error=None if record.ok else f"{record.error_kind}: {record.error}",
            run_id=run_id,
        )


_EXPECTED = {float: "a non-negative number or null", int: "a non-negative integer or null", str: "a string"}


def _field(obj: dict[str, Any], key: str, kind: type, required: bool = False) -> Any:
    """``obj[key]`` as ``kind``: float or int (finite, >= 0), or str; None when missing and not ``required``."""
    value: Any = obj.get(key)
    if value is None and not required:
        return None
    if kind is str:
        good = isinstance(value, str)
    else:  # a bool is an int to Python, never a figure here
        good = (isinstance(value, int if kind is int else int | float) and not isinstance(value, bool)
                and (kind is int or math.isfinite(value)) and value >= 0)  # fmt: skip
    if not good:
        raise BadLogLine(f"{key} is {value!r}, expected {_EXPECTED[kind]}")
    return float(value) if kind is float else value


@dataclass(frozen=True)
class RequestLog:
    """``logs/requests.jsonl`` with its rotation and ``error`` texts masked of secrets."""

    path: Path
    max_bytes: int | None = None
    backups: int = 5
    redact: Callable[[str], str] = str  # the text as it is

    @classmethod
    def of(cls, settings: Settings) -> RequestLog:
        """The request log of ``settings``, masking its secrets (:mod:`core.redact`)."""
        from core.redact import Redactor, secret_values

        return cls(
            settings.requests_log_file,
            int(settings.requests_log_max_mb * MIB),
            settings.requests_log_backups,
            Redactor(secret_values(settings)),
        )

    def encode(self, line: RequestLogLine) -> bytes:
        """``line`` as written (one JSON object and a newline, UTF-8; its error text masked)."""
        if line.error:
            line = replace(line, error=self.redact(line.error))
        return (json.dumps(line.as_dict(), ensure_ascii=False) + "\n").encode("utf-8")

    def append(self, line: RequestLogLine) -> None:
        """Append ``line`` (its error text masked; rotating when due); opens and closes the file.

        Raises:
            OSError: the log cannot be written.
        """
        append_rotating(self.path, self.encode(line), self.max_bytes, self.backups)

    def writer(self) -> RotatingWriter:
        """A descriptor kept open for many lines, rotating like :meth:`append`.

        Raises:
            OSError: the log cannot be opened.
        """
        return RotatingWriter(self.path, self.max_bytes, self.backups)
