"""The unit suite sees none of the stack's settings from the shell that runs it: a developer's exported
``VLLM_CPU_OMP_THREADS_BIND=0`` or ``CONCURRENCY=8`` (or a test lane's) would otherwise reach every ``Settings()`` a
test builds and the commands it starts, and the tests of defaults would test the shell. Tests that want a variable
set it themselves (``monkeypatch.setenv``, a subprocess's ``env``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from core.envtypos import setting_names
from tests.unit.engine_interpreter import ENGINE_PY, EngineInterpreter

SETTING_VARIABLES = tuple(name for name in setting_names() if name != "HF_HUB_OFFLINE")
"""Every environment variable a setting reads (aliases included, upper case) but ``HF_HUB_OFFLINE``, which the hub
libraries the tests load read too (a host kept offline stays so)."""


@pytest.fixture(autouse=True)
def _no_settings_from_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove each settings variable from ``os.environ`` for the test (restored after it)."""
    for name in SETTING_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def engine_interpreter() -> Iterator[Callable[..., str]]:
    """Runs a probe script in the engine env's Python (vLLM importable), one interpreter for the whole suite
    (:class:`tests.unit.engine_interpreter.EngineInterpreter`); skips without that env."""
    if not ENGINE_PY.exists():
        pytest.skip("no engine venv (.venvs/engine): vLLM's own code cannot be called")
    interpreter = EngineInterpreter()
    try:
        yield interpreter.run
    finally:
        interpreter.close()
