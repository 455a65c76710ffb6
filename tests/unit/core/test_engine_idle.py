"""Is vLLM idle before a run (core.enginestate, loadgen.orchestrate.replica_watch): its queue gauges summed over engines, and
the decision to go, wait or refuse — from scraped figures, with a scripted clock (no sockets)."""

from __future__ import annotations

from typing import Any

import pytest

from core.enginestate import EngineLoad, engine_load, idle_decision
from core.serverview_samples import parse_exposition
from core.settings import Settings
from loadgen.orchestrate.replica_watch import EngineBusy, wait_until_idle


def exposition(running: float, waiting: float, engine: str = "0") -> str:
    label = f'engine="{engine}",model_name="m"'
    return (f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{{label}}} {running}\n"
            f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{{label}}} {waiting}\n")  # fmt: skip


def test_the_load_is_summed_over_engines_and_replicas() -> None:
    """Two data-parallel engines in one scrape and a second replica: every sample counts; a scrape without the
    gauges (not vLLM) is left out, and with none at all the load is unknown."""
    dp = parse_exposition(exposition(3, 1, "0") + exposition(4, 0, "1"))
    other = parse_exposition(exposition(6, 2))
    load = engine_load([dp, other, {"vllm:request_success_total": {(): 1.0}}])
    assert load == EngineLoad(running=13, waiting=3, engines=2)
    assert load.text() == "13 running + 3 waiting requests over 2 engines"
    assert engine_load([{"vllm:request_success_total": {(): 1.0}}]) is None and engine_load([]) is None


@pytest.mark.parametrize(
    ("load", "waited_s", "limit_s", "decision"),
    [
        (EngineLoad(0, 0), 0.0, 60.0, "go"),
        (None, 0.0, 60.0, "go"),  # not vLLM: nothing to judge
        (EngineLoad(13, 0), 0.0, 0.0, "go"),  # IDLE_WAIT_S=0: no check
        (EngineLoad(13, 0), 10.0, 60.0, "wait"),
        (EngineLoad(0, 2), 59.9, 60.0, "wait"),  # waiting requests hold the engine too
        (EngineLoad(13, 0), 60.0, 60.0, "refuse"),
    ],
)
def test_a_run_goes_waits_or_refuses_by_the_engines_figures(
    load: EngineLoad | None, waited_s: float, limit_s: float, decision: str
) -> None:
    """Idle: go; busy: wait up to IDLE_WAIT_S, then refuse; unknown load or IDLE_WAIT_S=0: go."""
    assert idle_decision(load, waited_s, limit_s) == decision


class Script:
    """Scripted engine loads read one per poll, on a clock that each sleep moves on."""

    def __init__(self, *loads: EngineLoad | None) -> None:
        self.loads = list(loads)
        self.now = 100.0
        self.reads = 0

    def read(self) -> EngineLoad | None:
        self.reads += 1
        return self.loads.pop(0) if len(self.loads) > 1 else self.loads[0]

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def waits(script: Script, idle_wait_s: float, lines: list[str]) -> float:
    settings = Settings(_env_file=None, idle_wait_s=idle_wait_s)  # type: ignore[call-arg]
    kwargs: dict[str, Any] = {"read": script.read, "out": lines.append, "clock": lambda: script.now,
                              "sleep": script.sleep}  # fmt: skip
    return wait_until_idle(settings, **kwargs)


def test_a_busy_engine_is_waited_for_with_its_figure_printed() -> None:
    """13 running left by a stopped run, then 5, then none: the run waits 2 s, printing each figure."""
    lines: list[str] = []
    waited = waits(Script(EngineLoad(13, 0), EngineLoad(5, 0), EngineLoad(0, 0)), 60.0, lines)
    assert waited == 2.0
    assert lines[0].startswith("[INFO] vLLM is busy: 13 running + 0 waiting requests not of this run")
    assert "waiting up to 60 s for it to be idle (IDLE_WAIT_S)" in lines[0]
    assert lines[1:] == ["[INFO] vLLM still busy after 1 s: 5 running + 0 waiting requests",
                         "[INFO] vLLM is idle after 2 s of waiting"]  # fmt: skip


def test_an_engine_busy_past_idle_wait_s_refuses_the_run_with_the_figure() -> None:
    """Still 13 running after IDLE_WAIT_S: refused, saying the figure and what to do; an idle engine or
    IDLE_WAIT_S=0 is not waited for (no line; with 0 no read at all)."""
    with pytest.raises(EngineBusy) as refused:
        waits(Script(EngineLoad(13, 2)), 5.0, [])
    text = str(refused.value)
    assert text.startswith("vLLM is still busy after 5 s: 13 running + 2 waiting requests")
    assert "IDLE_WAIT_S=0" in text and "Nothing was sent." in text
    lines: list[str] = []
    assert waits(Script(EngineLoad(0, 0)), 60.0, lines) == 0.0 and lines == []
    off = Script(EngineLoad(13, 0))
    assert waits(off, 0.0, lines) == 0.0 and off.reads == 0
