"""Engine control in local mode: restarts go through the launch request, the launcher applies it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.enginestate import EngineError, EngineRequest, read_request
from core.settings import Settings
from engine import local_control as control
from engine.launcher import apply_request, vllm_argv
from engine.local_control import LocalEngine
from engine.model_resolve import ResolvedModel


class FakeSupervisor:
    """Records supervisord calls; ``state`` is program:vllm's state name (None: supervisord not running)."""

    def __init__(self, state: str | None = "RUNNING") -> None:
        self.state = state
        self.calls: list[str] = []

    def states(self) -> dict[str, dict[str, Any]] | None:
        return None if self.state is None else {"vllm": {"statename": self.state}}

    def proxy(self) -> Any:
        fake = self

        class _Rpc:
            def stopProcess(self, name: str) -> None:
                fake.calls.append(f"stop {name}")
                fake.state = "STOPPED"

            def startProcess(self, name: str, wait: bool = True) -> None:
                fake.calls.append(f"start {name}")
                fake.state = "RUNNING"

        class _Proxy:
            supervisor = _Rpc()

        return _Proxy()


def settings(tmp_path: Path) -> Settings:
    return Settings(_env_file=None, run_dir=tmp_path / "run", logs_dir=tmp_path / "logs")  # type: ignore[call-arg]


def test_restart_writes_the_request_then_stops_and_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A profiler restart is stored for the launcher before vLLM is stopped and started, then awaited."""
    monkeypatch.setattr(control, "wait_for_http", lambda url, timeout_s, abort, headers: (True, ""))
    s = settings(tmp_path)
    supervisor = FakeSupervisor()
    engine = LocalEngine(s, supervisor)  # type: ignore[arg-type]
    engine.restart(EngineRequest(profiler=True))
    assert supervisor.calls == ["stop vllm", "start vllm"]
    assert read_request(s.engine_request_file) == EngineRequest(profiler=True)
    status = engine.status()
    assert status is not None and status.running and status.request.profiler


def test_restart_that_does_not_come_up_raises_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A vLLM that dies while starting is an EngineError naming the state and log, not a hang."""
    monkeypatch.setattr(control, "wait_for_http", lambda url, timeout_s, abort, headers: (False, "vLLM is FATAL; see x.log"))
    with pytest.raises(EngineError, match="FATAL"):
        LocalEngine(settings(tmp_path), FakeSupervisor()).restart(EngineRequest())  # type: ignore[arg-type]


def test_without_supervisord_there_is_no_status_and_restart_refuses(tmp_path: Path) -> None:
    """Outside local mode the controller says so instead of touching anything."""
    engine = LocalEngine(settings(tmp_path), FakeSupervisor(state=None))  # type: ignore[arg-type]
    assert engine.status() is None
    with pytest.raises(EngineError, match="make up"):
        engine.restart(EngineRequest(profiler=True))


def test_launcher_applies_a_model_switch_and_the_profiler(tmp_path: Path) -> None:
    """A pending request replaces MODEL for this launch, and a profiler request adds --profiler-config."""
    s = apply_request(settings(tmp_path), EngineRequest(model="synthetic:tiny", profiler=True))
    assert s.model == "synthetic:tiny" and s.model_was_set
    resolved = ResolvedModel("synthetic:tiny", "synthetic", "/m/tiny", "ernie-tiny-synthetic", True, "tiny")
    assert "--profiler-config" in vllm_argv(s, resolved, profile=True)
    assert "--profiler-config" not in vllm_argv(s, resolved, profile=False)
    assert apply_request(settings(tmp_path), EngineRequest()).model is None


def test_stack_only_vllm_variables_do_not_reach_vllm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """VLLM_PORT is vLLM's own name for its internal communication port: ours (the API port) must not reach it."""
    from engine.launcher import vllm_env

    monkeypatch.setenv("VLLM_PORT", "8100")
    monkeypatch.setenv("VLLM_EXTRA_ARGS", "--max-num-seqs 4")
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "all")
    env = vllm_env(settings(tmp_path), "cpu")
    assert "VLLM_PORT" not in env and "VLLM_EXTRA_ARGS" not in env
    assert env.get("VLLM_USE_AOT_COMPILE") == "0"
