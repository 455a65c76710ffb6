"""The environments `make envs` builds carry bytecode for what the stack imports (scripts/setup_env.sh compiles
every installed module once): uv writes none, and where PYTHONDONTWRITEBYTECODE=1 (CI images, containers) Python
never writes it, so each process compiled what it imported from source again (vLLM's API server: 14.4 CPU-s per
import without it, 7.4 with it; a fresh-clone `make test` 18 min 41 s before, 12 min 59 s after, 2026-12-07)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from core.settings import PROJECT_ROOT

IMPORTED = {
    "app": ["locust/__init__.py", "gevent/__init__.py", "chainlit/__init__.py", "fastapi/__init__.py",
            "pydantic/main.py", "httpx/__init__.py"],
    "engine": ["vllm/__init__.py", "vllm/entrypoints/openai/api_server.py", "torch/__init__.py",
               "transformers/__init__.py"],
}  # fmt: skip
"""Modules each environment's processes import, relative to its site-packages."""


@pytest.mark.parametrize("env", sorted(IMPORTED))
def test_each_environment_holds_bytecode_for_what_the_stack_imports(env: str) -> None:
    tag = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = PROJECT_ROOT / ".venvs" / env / "lib" / tag / "site-packages"
    if not (PROJECT_ROOT / ".venvs" / env / ".stamp").exists():
        pytest.skip(f".venvs/{env} is not built here (make envs)")
    missing = [m for m in IMPORTED[env] if (site / m).exists() and not Path(importlib.util.cache_from_source(
        str(site / m))).exists()]  # fmt: skip
    assert not missing, f".venvs/{env} has no bytecode for {missing}: scripts/setup_env.sh compiles it (compileall)"
    assert all((site / m).exists() for m in IMPORTED[env]), [m for m in IMPORTED[env] if not (site / m).exists()]
