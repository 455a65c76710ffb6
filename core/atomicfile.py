"""Files replaced whole: a reader sees the old content or the new one, never half a file, and two writers of one
file never share a temporary file (each gets its own name from :func:`tempfile.mkstemp`)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

FILE_MODE = 0o644
"""Mode of every file written here (mkstemp creates 0600; reports and state are meant to be read by people and CI)."""


def temp_beside(path: Path, data: bytes | str) -> str:
    """``data`` (str: UTF-8) fsynced to a hidden temporary file beside ``path`` (mode :data:`FILE_MODE`); returns its
    path.

    Raises:
        OSError: the folder cannot be written (no temporary file is left).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, FILE_MODE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def atomic_write(path: Path, data: bytes | str) -> None:
    """Replace ``path`` with ``data`` atomically (:func:`temp_beside`, then a rename).

    Raises:
        OSError: the folder cannot be written or the rename failed.
    """
    tmp = temp_beside(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path`` (UTF-8); None when the file is missing, unreadable, not JSON or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
