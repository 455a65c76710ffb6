"""`make status`'s start-up lines: the cold start and the latest warm restarts from vLLM's log, the phases of the
last start, and a switch's new engine starting beside the serving one."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.replicas import record_cluster
from core.report_schema import StartupFacts
from core.settings import Settings
from core.slots import write_slot
from engine.vllmlog.startup import phases_line
from engine.vllmlog.tracker import StartupPhase
from stack import control, services
from stack.services import starting_beside, startup_times_line


def test_cold_and_warm_starts_are_listed() -> None:
    """The first start in the log is the cold one; up to five latest restarts follow."""
    facts = StartupFacts(phase="ready", detail="d", cold_start_s=152.4, warm_starts_s=[99.0, 80.2, 69.0])
    assert startup_times_line(facts) == "  starts: cold 152 s, warm 99 s / 80 s / 69 s"


def test_no_restart_yet_and_no_start() -> None:
    """One start so far says so; no finished start prints nothing."""
    assert startup_times_line(StartupFacts(phase="ready", detail="d", cold_start_s=51.0)) == (
        "  starts: cold 51 s, no warm restart yet"
    )
    assert startup_times_line(StartupFacts(phase="compiling", detail="d")) is None
    assert startup_times_line(None) is None


def test_a_switch_in_progress_shows_its_new_engine_apart(tmp_path: Path) -> None:
    """Behind the router, the slot a switch is starting is listed apart from the serving engine (not judged); once
    the record flips, the stopped old slot is not listed."""
    settings = Settings(_env_file=None, run_dir=tmp_path)  # type: ignore[call-arg]
    record_cluster(settings)
    states = {"vllm": {"statename": "RUNNING"}, "vllm-b": {"statename": "STARTING"}}
    assert starting_beside(settings, states) == ["vllm-b"]
    write_slot(tmp_path, 0, "b")
    assert starting_beside(settings, {"vllm": {"statename": "STOPPED"}, "vllm-b": {"statename": "RUNNING"}}) == []


def test_the_phases_of_the_last_start_are_one_line() -> None:
    """Each phase of the serving engine's latest start, labelled, with the total; nothing before it is ready."""
    phases = {"imports_api_server": 10.0, "spawn_engine_core": 7.0, "spawn_worker": 5.0, "load_weights": 1.0,
              "to_warmup": 1.0, "warmup_compile": 11.0, "kv_cache_and_rest": 1.0, "api_ready": 1.0}
    line = phases_line(phases)
    assert line is not None and line.startswith("  last start 37 s: API server start + imports 10, ")
    assert "compile + warm-up 11" in line
    assert phases_line({k: v for k, v in phases.items() if k != "api_ready"}) is None


def test_status_names_the_served_model_and_its_kv_pool() -> None:
    """`make status` says which model serves (the name clients use, what was asked for, synthetic or not) and its KV
    pool from vLLM's line: a fresh user could not tell ERNIE (58,240 tokens) from the tiny model after a switch."""
    from core.enginestate import EngineState
    from engine.vllmlog.tracker import StartupPhase
    from stack.services import serving_line

    state = EngineState(requested="synthetic:tiny", source="synthetic", model_arg="/m/tiny",
                        served_name="ernie-tiny-synthetic", synthetic=True)  # fmt: skip
    phase = StartupPhase("ready", "ready after 60 s", kv_cache_line="CPU KV cache size: 2,097,152 tokens")
    assert serving_line(state, phase) == (
        "vLLM serves ernie-tiny-synthetic (synthetic:tiny, synthetic weights); CPU KV cache size: 2,097,152 tokens")
    assert serving_line(None, phase) is None


def test_an_engine_that_came_up_and_stopped_answering_gets_the_way_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM RUNNING under supervisord and ready once, but silent now (stopped with SIGTERM, its engine core gone):
    `make status` says `./start_vllm.sh` brings it back (`make up` only says the stack runs); still starting, no
    hint."""
    settings = Settings(_env_file=None, run_dir=tmp_path, logs_dir=tmp_path)  # type: ignore[call-arg]
    monkeypatch.setattr(control, "process_states", lambda _s: {s.name: {"statename": "RUNNING"} for s in
                                                                    services.programs(settings)})  # fmt: skip
    monkeypatch.setattr(control, "answers", lambda url, _h: not url.endswith(":8100") and ":81" not in url)
    phase = StartupPhase("ready", "ready after 51 s")
    monkeypatch.setattr(control, "engine_phase", lambda _s: phase)
    assert control.status(settings) == 1
    out = capsys.readouterr().out
    assert "runs but no longer answers: `./start_vllm.sh` starts a fresh engine" in out, out
    phase = StartupPhase("loading", "loading weights")
    control.status(settings)
    assert "./start_vllm.sh" not in capsys.readouterr().out
