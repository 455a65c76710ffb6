"""make up with replicas: the router's command line, the supervisord programs and each replica's own settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.enginestate import EngineRequest
from core.replicas import record_cluster
from core.settings import PROJECT_ROOT, Settings
from core.slots import write_slot
from engine import local_control as control
from engine.local_control import LocalEngine
from engine.local_replicas import conf_text, program_names, replica_settings, router_argv, write_conf

BASE = PROJECT_ROOT / "deploy" / "supervisord.conf"


def make(tmp_path: Path, **values: Any) -> Settings:
    """Settings from ``values`` only (no .env), folders under ``tmp_path``."""
    return Settings(_env_file=None, run_dir=tmp_path / "run", logs_dir=tmp_path / "logs", **values)  # type: ignore[call-arg]


def test_one_replica_runs_the_shipped_conf(tmp_path: Path) -> None:
    """REPLICAS=1: supervisord runs deploy/supervisord.conf itself; the launcher's settings are unchanged."""
    settings = make(tmp_path)
    assert write_conf(settings, BASE) == BASE and conf_text(settings, "x") == "x"
    assert replica_settings(settings) is settings and program_names(settings) == ["vllm"]


def test_router_argv(tmp_path: Path) -> None:
    """The router listens on VLLM_PORT, sends to every engine, takes ROUTER_POLICY only when set."""
    settings = make(tmp_path, replicas=2, replica_port_base=9000, vllm_port=8100, vllm_host="127.0.0.1",
                    engine_urls="http://gpu2:8000")  # fmt: skip
    argv = router_argv(settings)
    assert argv[0].endswith("vllm-router")
    assert argv[argv.index("--port") + 1] == "8100"
    workers = argv[argv.index("--worker-urls") + 1 : argv.index("--prometheus-host")]
    assert workers == ["http://127.0.0.1:9000", "http://127.0.0.1:9001", "http://gpu2:8000"]
    assert argv[argv.index("--prometheus-port") + 1] == "9002" and "--policy" not in argv
    argv = router_argv(make(tmp_path, replicas=2, router_policy="round_robin"))
    assert argv[argv.index("--policy") + 1] == "round_robin"


def test_conf_has_one_program_per_replica_and_the_router(tmp_path: Path) -> None:
    """REPLICAS=3: programs vllm, vllm-1, vllm-2 (each with ENGINE_REPLICA and its own log) and router, written to
    RUN_DIR; supervisord's parser accepts it."""
    settings = make(tmp_path, replicas=3)
    (tmp_path / "run").mkdir()
    path = write_conf(settings, BASE)
    text = path.read_text()
    assert path == tmp_path / "run" / "supervisord.conf"
    assert text.count("[program:vllm]") == 1 and "[program:vllm-1]" in text and "[program:vllm-2]" in text
    assert 'environment=ENGINE_REPLICA="2"' in text and "vllm-2.log" in text
    assert "[program:router]\ncommand=%(ENV_APP_PYTHON)s -m engine.local_replicas\n" in text
    assert program_names(settings) == ["vllm", "vllm-1", "vllm-2"]
    from supervisor.options import UnhosedConfigParser

    parser = UnhosedConfigParser()
    parser.read_string(text)
    assert {"program:vllm", "program:vllm-1", "program:vllm-2", "program:router", "program:ui"} <= set(parser.sections())


def test_one_engine_behind_the_router_has_two_slots(tmp_path: Path) -> None:
    """`make up` with the router in front of one engine (the default): programs vllm (slot a, started) and vllm-b
    (slot b, started only by a switch), each with its replica, slot and log; the router; supervisord parses it.
    Slot b's launcher listens after the router's metrics port; after a switch the serving program is vllm-b."""
    settings = make(tmp_path, replica_port_base=9000)
    (tmp_path / "run").mkdir()
    record_cluster(settings)
    text = write_conf(settings, BASE).read_text()
    assert text.count("[program:vllm]") == 1 and "[program:vllm-b]" in text and "[program:router]" in text
    slot_b = text[text.index("[program:vllm-b]") :].split("\n[", 1)[0]
    assert 'environment=ENGINE_REPLICA="0",ENGINE_SLOT="b"' in slot_b and "autostart=false" in slot_b
    assert "vllm-b.log" in slot_b
    from supervisor.options import UnhosedConfigParser

    parser = UnhosedConfigParser()
    parser.read_string(text)
    assert {"program:vllm", "program:vllm-b", "program:router", "program:ui"} <= set(parser.sections())
    assert program_names(settings) == ["vllm"]
    assert replica_settings(settings.model_copy(update={"engine_slot": "b"})).vllm_port == 9002
    assert replica_settings(settings.model_copy(update={"engine_slot": "a"})).vllm_port == 9000
    write_slot(tmp_path / "run", 0, "b")
    assert program_names(settings) == ["vllm-b"]
    assert router_argv(settings)[router_argv(settings).index("--worker-urls") + 1] == "http://127.0.0.1:9002"


def test_router_only_host_has_no_engine_program(tmp_path: Path) -> None:
    """REPLICAS=0 with ENGINE_URLS: no vllm program, the router and the other services only."""
    text = conf_text(make(tmp_path, replicas=0, engine_urls="http://gpu2:8000"), BASE.read_text())
    assert "[program:vllm]" not in text and "[program:router]" in text and "[program:sidecar]" in text


def test_replica_settings_split_cores_and_gpus(tmp_path: Path) -> None:
    """Replica 1 of 2: its port, log and state file; on CPU the second half of the cores; on GPU the second half of
    the GPUs (GPU_DEVICES when set); a user's VLLM_CPU_OMP_THREADS_BIND is left alone."""
    settings = make(tmp_path, replicas=2, replica_port_base=9000, engine_replica=1)
    cpu = replica_settings(settings, cores=["0", "1", "2", "3"])
    assert cpu.vllm_port == 9001 and cpu.vllm_url.endswith(":9001")
    assert cpu.vllm_cpu_omp_threads_bind == "2,3" and cpu.vllm_cpu_num_of_reserved_cpu == 0
    assert cpu.vllm_log_file.name == "vllm-1.log" and cpu.engine_state_file.name == "engine_state-1.json"
    assert replica_settings(settings, gpu_count=4).gpu_devices == "2,3"
    assert replica_settings(settings.model_copy(update={"gpu_devices": "4,5"}), gpu_count=8).gpu_devices == "5"
    bound = settings.model_copy(update={"vllm_cpu_omp_threads_bind": "0-1"})
    assert replica_settings(bound, cores=["0", "1", "2", "3"]).vllm_cpu_omp_threads_bind == "0-1"


class Programs:
    """supervisord's programs as a dict of state names (its XML-RPC calls recorded): the process manager of a
    stack that these unit tests cannot start."""

    def __init__(self, states: dict[str, str]) -> None:
        self.state = dict(states)
        self.calls: list[str] = []

    def states(self) -> dict[str, dict[str, Any]]:
        return {name: {"statename": state} for name, state in self.state.items()}

    def proxy(self) -> Any:
        outer = self

        class Rpc:
            def stopProcess(self, name: str) -> None:
                outer.calls.append(f"stop {name}")
                outer.state[name] = "STOPPED"

            def startProcess(self, name: str, wait: bool = True) -> None:
                outer.calls.append(f"start {name}")
                outer.state[name] = "RUNNING"

        class Proxy:
            supervisor = Rpc()

        return Proxy()


def test_model_switch_restarts_every_replica_and_waits_for_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """./start_vllm.sh with REPLICAS=2: both engines stopped and started with the request, each replica's URL and the
    router restarted once they answer (a fresh router sends to all) and awaited; a replica that died shows in the
    status by name."""
    waited: list[str] = []
    def wait(url: str, timeout_s: float, abort: Any, headers: Any) -> tuple[bool, str]:
        waited.append(url)
        return True, ""

    monkeypatch.setattr(control, "wait_for_http", wait)
    s = make(tmp_path, replicas=2, replica_port_base=9000, vllm_port=8100)
    programs = Programs({"vllm": "RUNNING", "vllm-1": "RUNNING", "router": "RUNNING"})
    engine = LocalEngine(s, programs)  # type: ignore[arg-type]
    engine.restart(EngineRequest(model="synthetic:tiny"))
    assert programs.calls == ["stop vllm", "stop vllm-1", "start vllm", "start vllm-1", "stop router", "start router"]
    assert [u.rsplit(":", 1)[1] for u in waited] == ["9000/v1/models", "9001/v1/models", "8100/v1/models"]
    programs.state["vllm-1"] = "EXITED"
    status = engine.status()
    assert status is not None and not status.running and status.state == "vllm-1 EXITED"
