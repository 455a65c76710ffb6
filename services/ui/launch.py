"""The one entrypoint of the chat UI: ``python -m services.ui.launch`` runs Chainlit headless on UI_HOST:UI_PORT.

It checks the port, points Chainlit at ``services/ui`` (its ``.chainlit/config.toml``, ``chainlit.md`` and the
``.files`` upload folder live there) and *replaces itself* with ``python -m chainlit run services/ui/app.py``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

from services.netutil import port_in_use_message
from services.settings import PROJECT_ROOT, Settings, get_settings

APP_ROOT = Path(__file__).resolve().parent
APP_FILE = APP_ROOT / "app.py"


def chainlit_argv(settings: Settings) -> list[str]:
    """Command line of the Chainlit server for the app (headless: it never opens a browser)."""
    return [
        sys.executable,
        "-m",
        "chainlit",
        "run",
        str(APP_FILE),
        "--headless",
        "--host",
        settings.ui_host,
        "--port",
        str(settings.ui_port),
    ]


def chainlit_env(settings: Settings, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of the Chainlit process: app root, import path and, with UI_PASSWORD, the JWT secret.

    Without UI_AUTH_SECRET a random secret is made per launch (logins then last until the UI restarts).
    """
    env = dict(os.environ if base is None else base)
    env["CHAINLIT_APP_ROOT"] = str(APP_ROOT)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.pop("CHAINLIT_AUTH_SECRET", None)
    if settings.ui_password:
        env["CHAINLIT_AUTH_SECRET"] = settings.ui_auth_secret or secrets.token_urlsafe(48)
    return env


def config_problem(settings: Settings) -> str | None:
    """A message when the UI settings contradict each other, else None."""
    if settings.ui_auth_secret and not settings.ui_password:
        return "UI_AUTH_SECRET is set but UI_PASSWORD is not: set UI_PASSWORD to enable logins, or unset the secret."
    return None


def main(argv: list[str] | None = None) -> int:
    """Check the configuration and the port, then exec Chainlit. Exit 2 with a message when it cannot start."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.parse_args(argv)
    settings = get_settings()
    problem = config_problem(settings) or port_in_use_message(settings.ui_host, settings.ui_port, "UI_PORT")
    if problem:
        print(f"[ERROR] {problem}", file=sys.stderr, flush=True)
        return 2
    cmd = chainlit_argv(settings)
    login = f", login required (user {settings.ui_username})" if settings.ui_password else ""
    print(
        f"[INFO] Chat UI on http://{settings.ui_host}:{settings.ui_port} -> vLLM at {settings.vllm_url}{login}",
        flush=True,
    )
    os.chdir(PROJECT_ROOT)
    os.execvpe(cmd[0], cmd, chainlit_env(settings))
    return 0  # pragma: no cover - exec does not return


if __name__ == "__main__":
    sys.exit(main())
