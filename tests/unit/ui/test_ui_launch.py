"""The chat UI launcher: Chainlit command line, environment, app root and refusals (no processes started)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.settings import Settings
from ui import chainlit_launch as launch


@pytest.fixture(autouse=True)
def _no_outside_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings come only from the test: no .env file, no UI_* variables of the caller."""
    for name in ("UI_HOST", "UI_PORT", "UI_PASSWORD", "UI_AUTH_SECRET", "UI_USERNAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setitem(Settings.model_config, "env_file", None)


def test_chainlit_runs_headless_on_the_configured_address() -> None:
    """Chainlit runs the app headless on UI_HOST:UI_PORT."""
    argv = launch.chainlit_argv(Settings(ui_host="0.0.0.0", ui_port=8123))
    assert argv[1:4] == ["-m", "chainlit", "run"]
    assert argv[4].endswith("ui/chainlit_app.py")
    assert "--headless" in argv
    assert argv[argv.index("--host") + 1] == "0.0.0.0" and argv[argv.index("--port") + 1] == "8123"


def test_local_default_binds_loopback_on_8000() -> None:
    """Without settings the UI binds 127.0.0.1:8000."""
    argv = launch.chainlit_argv(Settings())
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "8000"


def test_environment_points_chainlit_at_the_app_root(tmp_path: Path) -> None:
    """CHAINLIT_APP_ROOT and PYTHONPATH are set; without a password no auth secret is passed on."""
    env = launch.chainlit_env(Settings(), tmp_path, base={"CHAINLIT_AUTH_SECRET": "stale", "PYTHONPATH": "/x"})
    assert env["CHAINLIT_APP_ROOT"] == str(tmp_path)
    assert env["PYTHONPATH"].endswith(":/x")
    assert "CHAINLIT_AUTH_SECRET" not in env


def test_password_enables_chainlit_auth_with_the_given_secret(tmp_path: Path) -> None:
    """With UI_PASSWORD the JWT secret is UI_AUTH_SECRET, or a random one per launch."""
    given = launch.chainlit_env(Settings(ui_password="pw", ui_auth_secret="s3cret"), tmp_path, base={})
    random_1 = launch.chainlit_env(Settings(ui_password="pw"), tmp_path, base={})
    random_2 = launch.chainlit_env(Settings(ui_password="pw"), tmp_path, base={})
    assert given["CHAINLIT_AUTH_SECRET"] == "s3cret"
    assert len(random_1["CHAINLIT_AUTH_SECRET"]) >= 32
    assert random_1["CHAINLIT_AUTH_SECRET"] != random_2["CHAINLIT_AUTH_SECRET"]


def test_secret_without_password_is_refused() -> None:
    """UI_AUTH_SECRET alone is a configuration error naming UI_PASSWORD."""
    problem = launch.config_problem(Settings(ui_auth_secret="s"))
    assert problem is not None and "UI_PASSWORD" in problem
    assert launch.config_problem(Settings()) is None


def test_app_root_gets_the_committed_config_and_is_per_port(tmp_path: Path) -> None:
    """The runtime root holds copies of config.toml and chainlit.md, one folder per port, outside the repo."""
    root = launch.prepare_app_root(launch.runtime_root(Settings(ui_port=8123), temp_dir=tmp_path))
    assert root.parent == tmp_path and root.name.endswith("-8123")
    config = (root / ".chainlit" / "config.toml").read_text(encoding="utf-8")
    assert "enable_telemetry = false" in config and 'name = "LLM Chat"' in config
    assert "ERNIE" not in config.split("[UI]")[1].split("[")[0], "the page names a model the stack may not serve"
    assert (root / "chainlit.md").is_file()
    assert launch.prepare_app_root(root) == root  # idempotent


def test_busy_port_exits_2_with_the_variable_to_change(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A busy UI port (here given as the UI's own flag) is refused with exit code 2 and an ``[ERROR]`` line naming
    UI_PORT."""
    monkeypatch.setattr(launch, "port_in_use_message", lambda host, port, var: f"Port {port} busy; set {var}")
    monkeypatch.setattr(launch.os, "execvpe", lambda *a: pytest.fail("must not start Chainlit"))
    assert launch.main(["--ui-port", "8123"]) == 2
    assert "[ERROR] Port 8123 busy; set UI_PORT" in capsys.readouterr().err


def test_installed_chainlit_page_loses_every_link_to_another_host() -> None:
    """Chainlit's own index.html (as installed) links Google Fonts and KaTeX's CDN; the offline copy links nothing
    outside the UI, and keeps its local script and stylesheet."""
    html = (launch.chainlit_frontend_dist() / "index.html").read_text(encoding="utf-8")
    assert "fonts.googleapis.com" in html and "cdn.jsdelivr.net" in html  # what the fix is for
    offline = launch.offline_index_html(html)
    assert not re.search(r"""(?:href|src)=["']https?://""", offline), offline
    assert re.search(r'<script type="module" crossorigin src="/assets/index-[^"]+\.js">', offline)
    assert re.search(r'<link rel="stylesheet" crossorigin href="/assets/index-[^"]+\.css">', offline)


def test_frontend_copy_links_the_assets_and_is_named_by_the_config(tmp_path: Path) -> None:
    """``frontend/`` holds the offline index.html and links Chainlit's assets; config.toml points Chainlit at it."""
    root = launch.prepare_app_root(tmp_path / "root")
    dist = launch.chainlit_frontend_dist()
    target = launch.prepare_frontend(root, dist)
    assert (target / "assets").resolve() == (dist / "assets").resolve()
    assert "googleapis" not in (target / "index.html").read_text(encoding="utf-8")
    assert launch.prepare_frontend(root, dist) == target  # a stale copy is replaced
    config = (root / ".chainlit" / "config.toml").read_text(encoding="utf-8")
    assert f'custom_build = "{launch.FRONTEND_DIR}"' in config
