"""The house plan's import contracts (pyproject's [tool.importlinter]) bite: ``make lint`` checks that the project
keeps them; these tests prove each kind of broken contract is caught."""

from __future__ import annotations

import ast
import itertools
import re
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


def _product_modules() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True)
    return [PROJECT_ROOT / name for name in listed.stdout.split() if not name.startswith("tests/")]


def test_no_two_product_modules_share_a_name() -> None:
    """Every product module's file name is its own (``__init__.py`` aside): a name says what the module is."""
    names = [path.name for path in _product_modules() if path.name != "__init__.py"]
    assert sorted({name for name in names if names.count(name) > 1}) == []


def test_a_main_guard_is_the_last_statement_of_its_module() -> None:
    """``if __name__ == "__main__":`` ends its module: run as ``python -m``, whatever stood after it would not be
    defined yet when ``main()`` runs (a merge once put the benchmark's lock class below it: a NameError on every run,
    which importing the module in a unit test never showed)."""
    for path in _product_modules():
        body = ast.parse(path.read_text()).body
        guards = [i for i, node in enumerate(body) if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
        assert guards in ([], [len(body) - 1]), f"{path}: statements after the __main__ guard"


def test_no_core_module_calls_itself_part_of_another() -> None:
    """A module of core is one concept: its docstring never says it is part (or half) of another module."""
    for path in (PROJECT_ROOT / "core").rglob("*.py"):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert not re.search(r"part of :mod:|second half|first half", doc), path


_LITERAL = re.compile(r"``.*?``\S*|\S+")


def _first_word(line: str) -> str:
    """The first word of ``line``, a literal in double backquotes counting as one word whatever its spaces."""
    match = _LITERAL.match(line.strip())
    return match.group(0) if match else ""


def test_docstring_lines_break_only_where_the_next_word_does_not_fit() -> None:
    """Docstring prose fills its 120 columns: no line ends early in mid-sentence although the next word fits (the
    broken wrapping mechanical edits leave: ``lists them\\nwith their\\ndefaults``)."""
    broken = []
    for path in _product_modules():
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str)):  # fmt: skip
                continue
            doc = lines[node.lineno - 1 : node.end_lineno]
            base = min((len(x) - len(x.lstrip()) for x in doc[1:] if x.strip()), default=0)
            for at, (line, after) in enumerate(itertools.pairwise(doc), node.lineno):
                indent = len(line) - len(line.lstrip())
                if (not line.strip() or not after.strip() or indent > base + 3 or re.match(r"\s*([-*] |\d+\. )", after)
                        or line.rstrip().endswith((".", ":", ";")) or after.strip().startswith('"""')):  # fmt: skip
                    continue
                if len(line) < 90 and len(line) + 1 + len(_first_word(after)) <= 120:
                    broken.append(f"{path.relative_to(PROJECT_ROOT)}:{at}: {line.strip()[-30:]!r}")
    assert broken == [], "\n".join(broken)
