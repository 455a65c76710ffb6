"""Bad input exits 2 whatever its kind: a value that does not parse (``REPLICAS=abc``) as one that parses but is
refused (``REPLICAS=0`` without ENGINE_URLS), before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.settings import PROJECT_ROOT, get_settings


def test_an_unparsable_setting_exits_2_with_its_name(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REPLICAS", "abc")
    get_settings.cache_clear()
    try:
        with pytest.raises(SystemExit) as exited:
            get_settings()
    finally:
        get_settings.cache_clear()
    assert exited.value.code == 2
    assert "REPLICAS=abc: Input should be a valid integer" in capsys.readouterr().err


@pytest.mark.parametrize(("value", "says"), [("abc", "REPLICAS=abc"), ("0", "REPLICAS=0 runs the router only")])
def test_make_up_refuses_bad_replicas_with_exit_2(value: str, says: str, tmp_path: Path) -> None:
    env = {**os.environ, "REPLICAS": value, "RUN_DIR": str(tmp_path / "run"), "LOGS_DIR": str(tmp_path / "logs"),
           "REPORTS_DIR": str(tmp_path / "reports")}  # fmt: skip
    env.pop("ENGINE_URLS", None)
    done = subprocess.run([sys.executable, "-m", "stack.control", "up"], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr and not (tmp_path / "run").exists()
