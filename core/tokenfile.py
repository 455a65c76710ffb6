"""The sidecar's write token in local mode: made once into ``run/sidecar_token`` (0600), read through the
settings (:meth:`core.settings.Settings.sidecar_auth_token`).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from core.settings import Settings

TOKEN_BYTES = 32
"""Random bytes of a generated token (43 URL-safe characters)."""


def ensure_token_file(path: Path) -> str:
    """The token in ``path``, a new random one written first (0600, exclusively) when missing or empty.

    Raises:
        OSError: the folder cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(3):
        try:
            token = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            token = ""
        if token:
            return token
        path.unlink(missing_ok=True)  # an empty file (a crash between create and write) is replaced
        token = secrets.token_urlsafe(TOKEN_BYTES)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue  # another process made it meanwhile: read theirs
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(token + "\n")
        return token
    raise OSError(f"could not create {path}")


def ensure_sidecar_token(settings: Settings) -> str:
    """SIDECAR_TOKEN when set, else SIDECAR_TOKEN_FILE's token, made when missing.

    Raises:
        OSError: the token file cannot be made.
    """
    return settings.sidecar_token or ensure_token_file(settings.sidecar_token_path)
