"""Settings fields of security: API key, sidecar token and limits, log and report bounds, logins (a group of
:class:`core.settings.Settings`; README "Security").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from core.knobs import Knobs

_HOST_RE = re.compile(r"(?:\*\.)?[A-Za-z0-9_.\-]{1,253}|\[?[0-9A-Fa-f:.]{2,45}\]?")


class SecurityKnobs(Knobs):
    """Secrets (``repr=False``: environment only, never printed), the sidecar's guards and the log/report bounds."""

    # --- security (README "Security") ----------------------------------------------------------------
    vllm_api_key: str | None = Field(default=None, repr=False)
    """Key vLLM requires on /v1 (its --api-key, handed over in the environment); the UI, the benchmark, the sidecar
    and the health checks send it."""
    sidecar_token: str | None = Field(default=None, repr=False)
    """Token of the sidecar's writing endpoints (Authorization: Bearer); unset: read from SIDECAR_TOKEN_FILE."""
    sidecar_token_file: Path | None = None
    """File holding the sidecar token (a compose secret: /run/secrets/sidecar_token); default run/sidecar_token,
    made by `make up` when missing."""
    sidecar_trusted_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """More host names the sidecar answers to (Host and Origin checks), comma-separated; 127.0.0.1, localhost, ::1,
    SIDECAR_HOST and the host of SIDECAR_BASE_URL always are."""
    reports_keep: int = Field(default=1000, ge=0)
    """Reports kept in reports/ (the oldest removed first; named baselines never); 0: all."""
    reports_max_age_days: float | None = Field(default=None, gt=0)
    """Remove reports older than this, days (named baselines never); unset: no limit."""
    vllm_log_max_mb: float = Field(default=100.0, gt=0)
    """vllm.log is rotated at this size, MiB."""
    vllm_log_backups: int = Field(default=5, ge=1)
    """Rotated vllm.log files kept (vllm.log.1 ...)."""
    vllm_log_to_file: bool = False
    """The launcher itself writes logs/vllm.log (rotated) besides its output: for containers, where no supervisord
    writes it."""
    requests_log_max_mb: float = Field(default=100.0, gt=0)
    """requests.jsonl is rotated at this size, MiB."""
    requests_log_backups: int = Field(default=5, ge=1)
    """Rotated requests.jsonl files kept."""
    locust_web_username: str = "admin"
    """Login name of Locust's web UI when LOCUST_WEB_PASSWORD is set."""
    locust_web_password: str | None = Field(default=None, repr=False)
    """Set to require a login (Locust's --web-login) for Locust's web UI."""

    @field_validator("sidecar_trusted_hosts", mode="before")
    @classmethod
    def _parse_hosts(cls, value: object) -> object:
        """SIDECAR_TRUSTED_HOSTS text (``sidecar,bench.lan``) -> names; each a host name or address, no port."""
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, list):
            for host in value:
                if not isinstance(host, str) or not _HOST_RE.fullmatch(host):
                    raise ValueError(f"{host!r} is not a host name (letters, digits, '.', '-', '*.' or an IP; no port)")
        return value
