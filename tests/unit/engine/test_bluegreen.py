"""The blue/green switch of ./start_vllm.sh: whether the host holds two engines (and the fallback when it cannot),
the old engine's drain, and one replica's swap over fakes of supervisord and the engines' HTTP."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from core.enginestate import EngineError, EngineRequest, read_request
from core.gpus import DeviceMemory
from core.replicas import record_cluster
from core.settings import Settings
from core.slots import active_slot
from core.units import GIB
from engine import bluegreen
from engine.bluegreen import (
    CPU_ENGINE_OVERHEAD_BYTES,
    Programs,
    cpu_room,
    decide,
    drain,
    gpu_room,
    switch_replica,
)
from engine.gpuplan import ParallelSizes, memory_plan


def test_a_host_that_cannot_hold_two_engines_falls_back_to_stop_and_start_with_the_figures() -> None:
    """CPU build, 3 GiB available, a new engine of 2 GiB pool + 1 GiB weights (+ its processes): restart, saying
    what it needs, what is free, the expected downtime and the knob that forces the side-by-side switch."""
    room = cpu_room(2 * GIB, 1 * GIB, 3 * GIB)
    assert not room.fits and room.need_bytes == 3 * GIB + CPU_ENGINE_OVERHEAD_BYTES
    decision = decide("auto", True, room, 42.4)
    assert decision.how == "restart"
    assert "host memory: the new engine needs 4.5 GiB, 3.0 GiB available" in decision.why
    assert "about 42 s without an engine" in decision.why and "ENGINE_SWITCH=blue-green" in decision.why
    assert "a whole vLLM start" in decide("auto", True, room, None).why


def test_a_host_that_holds_both_switches_side_by_side_and_the_knob_forces_either_way() -> None:
    """Enough memory: blue/green; ENGINE_SWITCH=restart stops first anyway; ENGINE_SWITCH=blue-green on a host too
    small tries side by side, warned; without the router in front there is no seam: restart, or refused when forced."""
    roomy, tight = cpu_room(GIB, GIB, 16 * GIB), cpu_room(GIB, GIB, GIB)
    assert roomy.fits and decide("auto", True, roomy, 30).how == "blue-green"
    assert decide("restart", True, roomy, 30).how == "restart"
    forced = decide("blue-green", True, tight, 30)
    assert forced.how == "blue-green" and "anyway" in forced.why
    assert decide("auto", False, roomy, 30).how == "restart"
    refused = decide("blue-green", False, roomy, 30)
    assert refused.how == "refuse" and "make down && make up" in refused.why


def test_the_compose_stack_switches_by_recreating_its_vllm_service_and_says_the_downtime() -> None:
    """Compose (one engine per container, no router inside): a stop-and-start naming why and the downtime to
    expect, whatever ENGINE_SWITCH=auto or restart; ENGINE_SWITCH=blue-green is refused there, not ignored."""
    decision = decide("auto", None, None, 71.6)
    assert decision.how == "restart" and decision.why.startswith("the compose stack runs vLLM as one container")
    assert "expect about 72 s without an engine" in decision.why
    assert decide("restart", None, None, None).how == "restart"
    refused = decide("blue-green", None, None, 30)
    assert refused.how == "refuse" and "recreates it" in refused.why


def test_gpu_room_is_the_plan_against_free_memory_now() -> None:
    """GPU build: the plan's need per GPU (weights + pool + headroom) against the free memory left beside the running
    engine; the tightest GPU is named; no free figure (no NVML): tried side by side."""
    free = [DeviceMemory(0, None, "A10", 24 * GIB, 20 * GIB), DeviceMemory(1, None, "A10", 24 * GIB, 5 * GIB)]
    plan = memory_plan(2 * GIB, 4 * GIB, 1.0, ParallelSizes(tensor=2), free)
    room = gpu_room(plan)
    assert not room.fits and room.where == "GPU 1 (A10)" and room.free_bytes == 5 * GIB
    assert gpu_room(memory_plan(2 * GIB, 1 * GIB, 1.0, ParallelSizes(tensor=2), free)).fits
    unknown = memory_plan(2 * GIB, 4 * GIB, 1.0, ParallelSizes(), [DeviceMemory(0, None, None, 24 * GIB)])
    assert gpu_room(unknown).fits and gpu_room(unknown).free_bytes is None


class Clock:
    """A fake monotonic clock that ``sleep`` moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_drain_waits_for_requests_in_flight_and_counts_those_cut() -> None:
    """2 in flight at the swap, then 1, 0, 0: drained, nothing cut; still 1 at the timeout: 1 cut; an engine that
    stops answering has nothing left to finish."""
    clock = Clock()
    counts = iter([2, 1, 0, 0])
    done = drain(lambda: next(counts), 60, clock.sleep, lambda: clock.now)
    assert (done.in_flight, done.cut) == (2, 0) and done.waited_s == pytest.approx(1.5)
    clock = Clock()
    stuck = drain(lambda: 1, 3, clock.sleep, lambda: clock.now)
    assert (stuck.in_flight, stuck.cut) == (1, 1) and stuck.waited_s >= 3
    clock = Clock()
    assert drain(lambda: None, 60, clock.sleep, lambda: clock.now).cut == 0


class FakePrograms(Programs):
    """supervisord's programs as states in a dict; ``fail``: a program that exits as soon as it is started."""

    def __init__(self, states: dict[str, str], fail: str | None = None) -> None:
        super().__init__(None)
        self.states = dict(states)
        self.fail = fail
        self.calls: list[str] = []

    def state(self, name: str) -> str:
        return self.states.get(name, "UNKNOWN")

    def start(self, name: str) -> None:
        self.calls.append(f"start {name}")
        self.states[name] = "EXITED" if name == self.fail else "RUNNING"

    def stop(self, name: str) -> None:
        if self.states.get(name) == "RUNNING":
            self.calls.append(f"stop {name}")
        self.states[name] = "STOPPED"


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Settings, list[str]]:
    """A recorded stack with the router in front of one engine (slot a on :9000, b on :9002); the router's worker
    API and the engines' HTTP are fakes recording what was asked of them."""
    settings = Settings(_env_file=None, run_dir=tmp_path / "run", logs_dir=tmp_path / "logs",  # type: ignore[call-arg]
                        replica_port_base=9000, startup_timeout_s=30)  # fmt: skip
    record_cluster(settings)
    calls: list[str] = []
    monkeypatch.setattr(bluegreen, "answers_completion", lambda url, headers: None)
    monkeypatch.setattr(bluegreen, "add_worker", lambda s, url: calls.append(f"add {url}"))
    monkeypatch.setattr(bluegreen, "remove_worker", lambda s, url: calls.append(f"remove {url}"))

    def in_flight(url: str, headers: dict[str, str]) -> int:
        calls.append(f"load {url}")
        return 0

    monkeypatch.setattr(bluegreen, "in_flight", in_flight)
    monkeypatch.setattr(bluegreen.time, "sleep", lambda s: None)
    return settings, calls


def test_a_switch_starts_the_new_engine_beside_the_old_then_swaps_drains_and_stops(
    stack: tuple[Settings, list[str]],
) -> None:
    """Slot b started with the request; once it answers the router gets it and loses slot a, the slot record flips,
    slot a drains (its in-flight count read) and only then stops."""
    settings, calls = stack
    programs = FakePrograms({"vllm": "RUNNING", "vllm-b": "STOPPED"})
    swapped = switch_replica(settings, 0, EngineRequest(model="synthetic:tiny"), programs,
                             lambda s, since: "why", say=lambda line: None)  # fmt: skip
    assert programs.calls == ["start vllm-b", "stop vllm"]
    assert calls[:2] == ["add http://127.0.0.1:9002", "remove http://127.0.0.1:9000"]
    assert calls[2:] and all(c == "load http://127.0.0.1:9000" for c in calls[2:])
    assert active_slot(settings.run_dir) == "b" and swapped.new_url.endswith(":9002")
    b = settings.model_copy(update={"engine_slot": "b"})
    assert read_request(b.engine_request_file).model == "synthetic:tiny"
    assert read_request(settings.model_copy(update={"engine_slot": "a"}).engine_request_file).model is None


def test_a_new_engine_that_dies_leaves_the_old_one_serving(stack: tuple[Settings, list[str]]) -> None:
    """Slot b exits while starting: EngineError naming it and its log's reason; the router and slot a untouched,
    the record still on a."""
    settings, calls = stack
    programs = FakePrograms({"vllm": "RUNNING"}, fail="vllm-b")
    reasons: list[Any] = []

    def why(s: Settings, since: Any) -> str:
        reasons.append(s.vllm_log_file.name)
        return "vLLM failed: ValueError: bad"

    with pytest.raises(EngineError, match=re.escape("vllm-b is EXITED; vllm serves on.\nvLLM failed: ValueError: bad")):
        switch_replica(settings, 0, EngineRequest(), programs, why, say=lambda line: None)
    assert reasons == ["vllm-b.log"] and calls == [] and programs.states["vllm"] == "RUNNING"
    assert active_slot(settings.run_dir) == "a"
