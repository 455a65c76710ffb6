"""The project's ``scripts/*.py`` as modules for tests (``scripts/`` is no package)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from core.settings import PROJECT_ROOT


def script_module(name: str) -> ModuleType:
    """``scripts/<name>.py`` loaded as module ``name`` (run afresh on each call).

    Raises:
        FileNotFoundError: no such script.
    """
    path = PROJECT_ROOT / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None or not path.exists():
        raise FileNotFoundError(path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import does (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module
