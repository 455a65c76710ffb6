"""``logs/requests.jsonl``: one line per chat request (UI and load tests), read by the log analyzer.

Line format (JSON object): ``ts`` (ISO 8601 UTC), ``source`` (``ui`` | ``loadtest``), ``request_id``, ``model``,
``prompt_tokens``, ``completion_tokens``, ``ttft_ms``, ``total_ms``, ``status`` (``ok`` | ``error``), ``error``
(null or the cause). Appends are single ``write`` calls of one line, so concurrent writers do not interleave.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel


class RequestLogLine(BaseModel):
    """One line of ``logs/requests.jsonl``."""

    ts: str
    source: Literal["ui", "loadtest"]
    request_id: str
    model: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    ttft_ms: float | None
    total_ms: float | None
    status: Literal["ok", "error"]
    error: str | None = None


def now_iso() -> str:
    """Current UTC time, ISO 8601 with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def append_request_log(path: Path, line: RequestLogLine) -> None:
    """Append ``line`` to ``path`` (created with its folder); one O_APPEND write per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(line.model_dump(), ensure_ascii=False) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
