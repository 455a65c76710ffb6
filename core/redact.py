"""Keep secrets out of everything the stack writes or answers: tokens, keys and passwords become ``***``.

Masked: configured secrets (``repr=False`` settings fields), secret-looking flag values in the extra args,
secret-named environment variables and Hugging Face tokens, raw, JSON- and HTML-escaped. Secrets shorter than
:data:`SHORT_SECRET_LEN` only where they stand alone; JSON is redacted value by value.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from core.parsing import flag_roles, option_values
from core.settings import Settings

MASK = "***"
SHORT_SECRET_LEN = 6
"""Secrets shorter than this are masked only as whole words (``(?<!\\w)secret(?!\\w)``)."""
ENV_SECRET_MIN_LEN = 6
"""Secret-named environment variables outside the settings count from this length (``X_TOKEN=1`` is not one)."""
SECRET_ENV_RE = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY)", re.IGNORECASE)
HF_TOKEN_RE = re.compile(r"\bhf_[A-Za-z0-9]{20,}\b")
SECRET_FLAG_RE = re.compile(r"--?(?:[\w.]+[-_])?(?:api[-_]?key|key|token|secret|password|passwd)", re.IGNORECASE)
"""A command-line flag whose value is a secret: ``--api-key``, ``--hf-token``, ``--password`` (not ``--tokenizer``,
``--ssl-keyfile`` or ``--max-num-batched-tokens``)."""


def is_secret_flag(arg: str) -> bool:
    """True for ``--api-key``, ``--hf-token=…`` and the like (:data:`SECRET_FLAG_RE`)."""
    return arg.startswith("-") and SECRET_FLAG_RE.fullmatch(arg.partition("=")[0]) is not None


def split_secret_flags(argv: Iterable[str]) -> tuple[list[str], list[str]]:
    """``argv`` as (everything but the secret-looking flags, those flags with their values), each in order."""
    kept: list[str] = []
    secret: list[str] = []
    for arg, role in flag_roles(argv, is_secret_flag):
        (kept if role == "plain" else secret).append(arg)
    return kept, secret


def redact_argv(argv: Iterable[str]) -> list[str]:
    """``argv`` with the values of secret-looking flags replaced by ``***`` (for logs and state files)."""
    out: list[str] = []
    for arg, role in flag_roles(argv, is_secret_flag):
        name, eq, _ = arg.partition("=")
        out.append(MASK if role == "value" else f"{name}={MASK}" if role == "flag" and eq else arg)
    return out


def configured_secrets(settings: Settings) -> list[str]:
    """Every configured secret: ``repr=False`` settings, the token, secret flag values of extra args."""
    import shlex

    secret = [name for name, info in type(settings).model_fields.items() if info.repr is False]
    values = [value for name in secret if isinstance(value := getattr(settings, name), str)]
    token = settings.sidecar_auth_token()
    if token:
        values.append(token)
    for extra in (settings.vllm_extra_args, settings.locust_extra_args):
        try:
            values += option_values(shlex.split(extra), is_secret_flag)
        except ValueError:  # unbalanced quotes: the launcher refuses it anyway
            continue
    return [v for v in values if v and v.strip()]


def secret_values(settings: Settings, environ: Mapping[str, str] | None = None) -> list[str]:
    """:func:`configured_secrets` plus secret-named environment variables, longest first."""
    env = os.environ if environ is None else environ
    values = configured_secrets(settings)
    values += [v for name, v in env.items() if SECRET_ENV_RE.search(name) and len(v.strip()) >= ENV_SECRET_MIN_LEN]
    return sorted({v for v in values if v}, key=len, reverse=True)


class Redactor:
    """Masks known secrets and Hugging Face tokens as ``***`` in text (call) or bytes (:meth:`bytes`)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if secret:
                forms.update({secret, json.dumps(secret)[1:-1], html.escape(secret)})
        ordered = sorted(forms, key=len, reverse=True)
        parts = [re.escape(f) if len(f) >= SHORT_SECRET_LEN else rf"(?<!\w){re.escape(f)}(?!\w)" for f in ordered]
        parts.append(HF_TOKEN_RE.pattern)
        self._re = re.compile("|".join(parts))
        self._bytes_re = re.compile("|".join(parts).encode("utf-8"))
        self.longest = max((len(f.encode("utf-8")) for f in ordered), default=0)
        """Bytes of the longest form (a stream redactor keeps this much back between reads)."""

    def __call__(self, text: str) -> str:
        """``text`` with every secret masked."""
        return self._re.sub(MASK, text)

    def bytes(self, data: bytes) -> bytes:
        """``data`` (UTF-8) with every secret masked."""
        return self._bytes_re.sub(MASK.encode(), data)


def redact_json(obj: Any, redact: Callable[[str], str]) -> Any:
    """A copy of parsed JSON ``obj`` with ``redact`` applied to every string value (keys untouched)."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {k: redact_json(v, redact) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact_json(v, redact) for v in obj]
    return obj


def strip_url_credentials(url: str) -> str:
    """``http://user:pass@host:8100`` -> ``http://***@host:8100``; other URLs unchanged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=f"{MASK}@{parts.netloc.rsplit('@', 1)[1]}"))
