"""The one entrypoint of the chat UI: ``python -m ui.chainlit_launch`` runs Chainlit headless on UI_HOST:UI_PORT.

It checks the port, prepares Chainlit's app root and *replaces itself* with ``python -m chainlit run
ui/chainlit_app.py``. The committed ``ui/.chainlit/config.toml`` and ``ui/chainlit.md`` are copied into a runtime
folder per port (CHAINLIT_APP_ROOT), where Chainlit also writes what it generates: nothing lands in the repository,
and two UIs never delete each other's ``.files``. The page loads offline: :func:`prepare_frontend` puts a copy of
Chainlit's built frontend there (the committed config's ``custom_build``) whose ``index.html`` links no other host
(Chainlit's links Google Fonts and KaTeX's CSS on a CDN, which no config option removes).
"""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
import shutil
import sys
import tempfile
from pathlib import Path

from core.flags import build_parser, flag_environment, parse
from core.knobs.commands import UI
from core.net import port_in_use_message
from core.settings import PROJECT_ROOT, Settings, service_env

UI_DIR = Path(__file__).resolve().parent
APP_FILE = UI_DIR / "chainlit_app.py"
COMMITTED_FILES = (Path(".chainlit") / "config.toml", Path("chainlit.md"))
FRONTEND_DIR = "frontend"  # custom_build in the committed config.toml
_FOREIGN_LINK_RE = re.compile(r"<link\b[^>]*\bhref=[\"']https?://[^>]*>\s*", re.IGNORECASE | re.DOTALL)


def runtime_root(settings: Settings, temp_dir: Path | None = None) -> Path:
    """Chainlit's app root for this UI: ``<tmp>/llm-serve-ui-<uid>-<port>`` (one per port, outside the repo)."""
    base = temp_dir or Path(tempfile.gettempdir())
    return base / f"llm-serve-ui-{os.getuid()}-{settings.ui_port}"


def prepare_app_root(root: Path) -> Path:
    """Copy the committed Chainlit files into ``root`` (created; stale copies replaced). Returns ``root``.

    Raises:
        OSError: ``root`` cannot be written.
    """
    for relative in COMMITTED_FILES:
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(UI_DIR / relative, target)
    return root


def chainlit_frontend_dist() -> Path:
    """Chainlit's built frontend (``chainlit/frontend/dist``), found without importing Chainlit.

    Raises:
        FileNotFoundError: Chainlit is not installed, or has no built frontend.
    """
    spec = importlib.util.find_spec("chainlit")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        dist = Path(location) / "frontend" / "dist"
        if (dist / "index.html").is_file():
            return dist
    raise FileNotFoundError("Chainlit's built frontend (chainlit/frontend/dist/index.html) is not installed")


def offline_index_html(html: str) -> str:
    """``html`` without ``<link>`` tags to other hosts (fonts, CDN stylesheets, preconnects); scripts stay local."""
    return _FOREIGN_LINK_RE.sub("", html)


def prepare_frontend(root: Path, dist: Path) -> Path:
    """Make ``root/frontend``: every entry of Chainlit's ``dist`` linked, ``index.html`` rewritten by
    :func:`offline_index_html`. Stale copies are replaced. Returns the folder.

    Raises:
        OSError: the folder cannot be written or ``dist`` cannot be read.
    """
    target = root / FRONTEND_DIR
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for entry in dist.iterdir():
        if entry.name != "index.html":
            (target / entry.name).symlink_to(entry.resolve())
    html = (dist / "index.html").read_text(encoding="utf-8")
    (target / "index.html").write_text(offline_index_html(html), encoding="utf-8")
    return target


def chainlit_argv(settings: Settings) -> list[str]:
    """Command line of the Chainlit server for the app (headless: it never opens a browser)."""
    return [sys.executable, "-m", "chainlit", "run", str(APP_FILE), "--headless",
            "--host", settings.ui_host, "--port", str(settings.ui_port)]  # fmt: skip


def chainlit_env(settings: Settings, app_root: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of the Chainlit process: app root, import path and, with UI_PASSWORD, the JWT secret.

    Without UI_AUTH_SECRET a random secret is made per launch (logins then last until the UI restarts).
    """
    env = service_env("ui", base)  # no HF token, sidecar token or Locust password in the UI's process
    env["CHAINLIT_APP_ROOT"] = str(app_root)
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
    args, settings = parse(build_parser("python -m ui.chainlit_launch", __doc__ or "", UI), argv)
    problem = config_problem(settings) or port_in_use_message(settings.ui_host, settings.ui_port, "UI_PORT")
    if problem:
        print(f"[ERROR] {problem}", file=sys.stderr, flush=True)
        return 2
    try:
        app_root = prepare_app_root(runtime_root(settings))
        prepare_frontend(app_root, chainlit_frontend_dist())
    except OSError as exc:
        print(f"[ERROR] Cannot prepare Chainlit's folder: {exc}", file=sys.stderr, flush=True)
        return 2
    cmd = chainlit_argv(settings)
    login = f", login required (user {settings.ui_username})" if settings.ui_password else ""
    print(
        f"[INFO] Chat UI on http://{settings.ui_host}:{settings.ui_port} -> vLLM at {settings.vllm_url}{login}",
        flush=True,
    )
    os.chdir(PROJECT_ROOT)
    # Chainlit's process reads its settings again: the flags go with it as their variables
    os.execvpe(cmd[0], cmd, chainlit_env(settings, app_root, {**os.environ, **flag_environment(args)}))
    return 0  # pragma: no cover - exec does not return


if __name__ == "__main__":
    sys.exit(main())
