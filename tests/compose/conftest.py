"""The compose stack that ``scripts/compose_stack.sh test`` (``make compose-test``) started and stops again.

These checks never start or stop containers: they read the ports and the compose project from the environment the
script exports, and talk to the containers only through their published ports and the compose CLI.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
COMPOSE = PROJECT_ROOT / "scripts" / "compose.sh"


@dataclass(frozen=True)
class ComposeStack:
    """The running compose stack: URLs of the published ports, the values of the containers' env_file (test
    secrets: APP_ENV_FILE) and the project's folders on the host."""

    project: str
    ports: dict[str, int]
    env_file: dict[str, str] = field(default_factory=dict)

    def url(self, port_variable: str) -> str:
        """``http://127.0.0.1:<published port>`` of the service behind ``port_variable`` (e.g. ``UI_PORT``)."""
        return f"http://127.0.0.1:{self.ports[port_variable]}"

    @property
    def logs_dir(self) -> Path:
        """./logs, bind-mounted as /app/logs into every container."""
        return PROJECT_ROOT / "logs"

    @property
    def reports_dir(self) -> Path:
        """./reports, bind-mounted as /app/reports into the sidecar, its only writer."""
        return PROJECT_ROOT / "reports"

    def compose(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        """``scripts/compose.sh ARGS`` (Docker Compose on this project's engine) with the stack's environment."""
        return subprocess.run(
            [str(COMPOSE), *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=timeout_s, check=False
        )


@pytest.fixture(scope="session")
def stack() -> ComposeStack:
    """The stack, after checking that its sidecar answers; fails with the way to start it when it does not."""
    project = os.environ.get("COMPOSE_PROJECT_NAME", "")
    variables = ("VLLM_PORT", "UI_PORT", "SIDECAR_PORT", "LOCUST_WEB_PORT")
    if not project or not all(os.environ.get(name) for name in variables):
        pytest.fail("no compose stack: these checks run inside `make compose-test` (scripts/compose_stack.sh test)")
    env_file = Path(os.environ["APP_ENV_FILE"]) if os.environ.get("APP_ENV_FILE") else None
    lines = env_file.read_text(encoding="utf-8").splitlines() if env_file else []  # NAME=value, as the script wrote
    values = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
    found = ComposeStack(project, {name: int(os.environ[name]) for name in variables}, values)
    try:
        httpx.get(f"{found.url('SIDECAR_PORT')}/health", timeout=10).raise_for_status()
    except httpx.HTTPError as exc:
        pytest.fail(f"the compose stack's sidecar does not answer ({exc}): run `make compose-test`")
    return found
