"""The house plan's import contracts (pyproject's [tool.importlinter]) bite: ``make lint`` checks that the project
keeps them; these tests prove each kind of broken contract is caught."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from core.settings import PROJECT_ROOT

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def run_lint(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the project's contracts, over the packages found in ``root``."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", "--config", str(PROJECT_ROOT / "pyproject.toml")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
    )




def _package(root: Path, dotted: str, body: str = "") -> None:
    path = root.joinpath(*dotted.split("."))
    path.mkdir(parents=True, exist_ok=True)
    (path / "__init__.py").write_text(body)


def test_each_kind_of_forbidden_import_is_caught(tmp_path: Path) -> None:
    """A tree with an upward import from core, a sidecar -> loadgen import and a cycle breaks every contract."""
    for name in ("stack.control", "stack.engine_switch", "engine", "ui", "logtools"):
        _package(tmp_path, name)
    _package(tmp_path, "core", "import engine\n")  # the core reaching up
    _package(tmp_path, "core.a", "import core.b\n")
    _package(tmp_path, "core.b", "import core.a\n")  # a folder-level cycle
    _package(tmp_path, "loadgen")
    _package(tmp_path, "sidecar", "import loadgen\n")  # a sibling's internals
    result = run_lint(tmp_path)
    assert result.returncode != 0
    assert "0 kept, 3 broken" in result.stdout, result.stdout
