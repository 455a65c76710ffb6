"""vLLM's pid means vLLM only in the pid namespace it was recorded in: the launcher records the namespace, and the
sidecar's sampler and the UI never look the pid up from another one (containers without ``pid: host``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core.enginestate import EngineState, pid_namespace, read_engine_state, write_engine_state
from sidecar.sampling.sampler import FOREIGN_NAMESPACE, UNKNOWN_NAMESPACE, EnginePid, Sampler, engine_pid
from ui.status import engine_process_alive

HERE = pid_namespace()
OTHER = "pid:[4026530000]"  # a namespace number no real process here has (the host's first is 4026531836)

linux_only = pytest.mark.skipif(HERE is None, reason="no /proc/self/ns/pid on this system")


def state_file(tmp_path: Path, **fields: Any) -> Path:
    """An engine_state.json recording ``fields`` (pid, pid_namespace, ...) with the launcher's required fields."""
    path = tmp_path / "engine_state.json"
    base: dict[str, Any] = {"requested": "m", "source": "local", "model_arg": "/m", "served_name": "m"}
    write_engine_state(path, EngineState(**{**base, **fields}))
    return path


@linux_only
def test_pid_namespace_names_this_process_namespace() -> None:
    """The namespace is the kernel's name of /proc/self/ns/pid, the same for every process of one namespace."""
    assert HERE is not None and HERE.startswith("pid:[") and os.readlink("/proc/self/ns/pid") == HERE
    child = subprocess.Popen(["sleep", "5"])  # a child of pytest: same namespace (not the parent: under setsid
    try:  # it is PID 1, whose /proc entry another user's process may not read)
        assert os.readlink(f"/proc/{child.pid}/ns/pid") == HERE
    finally:
        child.kill()
        child.wait()


@linux_only
def test_the_launcher_records_its_pid_namespace(tmp_path: Path) -> None:
    """engine_state.json carries vLLM's pid and the launcher's pid namespace (its child's too)."""
    from engine import launcher as launch
    from engine.model_resolve import ResolvedModel
    from tests.unit.deploy.containers_support import settings_from

    with pytest.MonkeyPatch.context() as mp:
        settings = settings_from({"LOGS_DIR": str(tmp_path)}, mp)
        resolved = ResolvedModel("m", "local", "/m", "m", False)
        launch.write_state(settings, resolved, [sys.executable], False, pid=4242)
    state = read_engine_state(settings.engine_state_file)
    assert state is not None and state.pid == 4242 and state.pid_namespace == HERE


@linux_only
def test_sidecar_samples_vllm_only_in_its_own_pid_namespace(tmp_path: Path) -> None:
    """Same namespace: the pid is sampled. Another namespace: no pid, and the reason says vLLM runs elsewhere."""
    same = state_file(tmp_path, pid=os.getpid(), pid_namespace=HERE)
    assert engine_pid(same) == EnginePid(os.getpid())
    foreign = state_file(tmp_path, pid=os.getpid(), pid_namespace=OTHER)
    assert engine_pid(foreign) == EnginePid(None, FOREIGN_NAMESPACE)
    legacy = state_file(tmp_path, pid=os.getpid())  # a launcher from before the namespace was recorded
    assert engine_pid(legacy) == EnginePid(None, UNKNOWN_NAMESPACE)


@linux_only
def test_sampler_never_reads_a_process_from_another_namespace(tmp_path: Path) -> None:
    """With vLLM in another container the pid names this very process here; the sampler still reads nothing and
    reports vLLM's memory and CPU as unavailable, with the reason; GPU readings are not affected."""
    path = state_file(tmp_path, pid=os.getpid(), pid_namespace=OTHER)
    sampler = Sampler(None, pid_source=lambda: engine_pid(path), interval_s=10)
    sample = sampler.sample_once()
    assert sample.vllm_rss_gb is None and sample.vllm_cpu_percent is None
    assert sampler.cpu_unavailable_reason == FOREIGN_NAMESPACE
    assert "another pid namespace" in FOREIGN_NAMESPACE and "not visible to the sidecar" in FOREIGN_NAMESPACE
    state_file(tmp_path, pid=os.getpid(), pid_namespace=HERE)  # the engine restarted beside the sidecar
    sample = sampler.sample_once()
    assert sample.vllm_rss_gb is not None and sample.vllm_rss_gb > 0 and sampler.cpu_unavailable_reason is None


def test_engine_pid_without_a_state_file_says_so(tmp_path: Path) -> None:
    """No engine_state.json: no pid, and the reason names the missing file."""
    found = engine_pid(tmp_path / "missing.json")
    assert found.pid is None and found.reason and "engine_state.json" in found.reason


@linux_only
def test_ui_does_not_trust_a_pid_from_another_namespace(tmp_path: Path) -> None:
    """A pid recorded in another namespace is not looked up in /proc (it may be any process here): only a recent
    launch counts as alive, as for another host."""
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cmdline").write_bytes(b"python\0-m\0vllm.entrypoints.openai.api_server\0")
    base: dict[str, Any] = {"requested": "m", "source": "local", "model_arg": "/m", "served_name": "m", "pid": 42}
    host = os.uname().nodename
    mine = EngineState(**base, pid_namespace=HERE, hostname=host, started_at=0.0)
    assert engine_process_alive(mine, tmp_path, hostname=host, now_s=10_000.0)
    theirs = EngineState(**base, pid_namespace=OTHER, hostname=host, started_at=0.0)
    assert not engine_process_alive(theirs, tmp_path, hostname=host, now_s=10_000.0, startup_window_s=900.0)
    assert engine_process_alive(theirs, tmp_path, hostname=host, now_s=100.0, startup_window_s=900.0)
