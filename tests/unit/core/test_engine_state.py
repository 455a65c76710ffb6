"""The engine state file and the engine request: one typed reader/writer each."""

from __future__ import annotations

import json
from pathlib import Path

from core.enginestate import (
    EngineRequest,
    EngineState,
    read_engine_state,
    read_request,
    write_engine_state,
    write_request,
)


def test_state_round_trips_and_broken_files_read_as_none(tmp_path: Path) -> None:
    """What the launcher writes reads back equal; a missing, non-JSON or incomplete file reads as None."""
    path = tmp_path / "engine_state.json"
    state = EngineState(requested="synthetic:tiny", source="synthetic", model_arg="/m/tiny", served_name="tiny", pid=7)
    write_engine_state(path, state)
    assert read_engine_state(path) == state
    assert read_engine_state(tmp_path / "missing.json") is None
    path.write_text("{not json")
    assert read_engine_state(path) is None
    path.write_text(json.dumps({"pid": 5}))
    assert read_engine_state(path) is None


def test_engine_python_is_argv0() -> None:
    """The interpreter running vLLM is the first argument of its command line."""
    state = EngineState(requested="m", source="local", model_arg="/m", served_name="m", argv=["/venv/bin/python", "-m"])
    assert state.engine_python == "/venv/bin/python"
    assert EngineState(requested="m", source="local", model_arg="/m", served_name="m").engine_python is None


def test_empty_request_removes_the_file(tmp_path: Path) -> None:
    """A model switch or profiler request is kept for the next launch; the empty request leaves no file."""
    path = tmp_path / "run" / "engine_request.json"
    write_request(path, EngineRequest(model="synthetic:tiny", profiler=True))
    assert read_request(path) == EngineRequest(model="synthetic:tiny", profiler=True)
    write_request(path, EngineRequest())
    assert not path.exists()
    assert read_request(path) == EngineRequest()
