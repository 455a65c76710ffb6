"""Keep secrets out of everything the sidecar writes: tokens and passwords become ``***``.

Reports are built from explicit fields, so no secret is ever copied into one on purpose; this is the second line:
the known secret values (HF token, UI password, API keys from the environment) are replaced in the text of every
file written to ``reports/``, in their raw, JSON-escaped and HTML-escaped forms.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

from core.settings import Settings

MASK = "***"
MIN_SECRET_LEN = 6  # shorter values would mask ordinary words
SECRET_ENV_RE = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY)", re.IGNORECASE)
HF_TOKEN_RE = re.compile(r"\bhf_[A-Za-z0-9]{20,}\b")


def secret_values(settings: Settings, environ: Mapping[str, str] | None = None) -> list[str]:
    """Values to mask: the settings' secret fields and every environment variable named like a secret."""
    env = os.environ if environ is None else environ
    values = [settings.hf_token, settings.ui_password, settings.ui_auth_secret]
    values += [value for name, value in env.items() if SECRET_ENV_RE.search(name)]
    return sorted({v for v in values if v and len(v) >= MIN_SECRET_LEN}, key=len, reverse=True)


class Redactor:
    """Replaces known secret values, and anything shaped like a Hugging Face token, with ``***``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms: set[str] = set()
        for secret in secrets:
            forms.update({secret, json.dumps(secret)[1:-1], html.escape(secret)})
        self._forms = sorted((f for f in forms if len(f) >= MIN_SECRET_LEN), key=len, reverse=True)

    def __call__(self, text: str) -> str:
        """``text`` with every secret masked."""
        for form in self._forms:
            text = text.replace(form, MASK)
        return HF_TOKEN_RE.sub(MASK, text)


def strip_url_credentials(url: str) -> str:
    """``http://user:pass@host:8100`` -> ``http://***@host:8100``; other URLs unchanged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=f"{MASK}@{parts.netloc.rsplit('@', 1)[1]}"))
