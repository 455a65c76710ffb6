"""Is the engine idle before a run? vLLM's ``vllm:num_requests_running`` + ``waiting`` gauges summed over its
engines, and whether a run goes, waits or is refused (pure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from core.serverview_samples import Samples

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
Decision = Literal["go", "wait", "refuse"]


@dataclass(frozen=True)
class EngineLoad:
    """Requests the engines hold now, summed over the ``engines`` scraped that expose the gauges."""

    running: int
    waiting: int
    engines: int = 1

    @property
    def busy(self) -> bool:
        """Any request running or waiting."""
        return self.running + self.waiting > 0

    def text(self) -> str:
        """``13 running + 2 waiting requests`` (``… over 2 engines`` for several)."""
        over = f" over {self.engines} engines" if self.engines > 1 else ""
        return f"{self.running} running + {self.waiting} waiting requests{over}"


def engine_load(scrapes: Sequence[Samples]) -> EngineLoad | None:
    """Requests running and waiting summed over every engine of ``scrapes``; None without the gauges."""
    exposed = [samples for samples in scrapes if RUNNING in samples or WAITING in samples]
    if not exposed:
        return None
    total = {gauge: sum(sum(samples.get(gauge, {}).values()) for samples in exposed) for gauge in (RUNNING, WAITING)}
    return EngineLoad(round(total[RUNNING]), round(total[WAITING]), len(exposed))


def idle_decision(load: EngineLoad | None, waited_s: float, limit_s: float) -> Decision:
    """``go`` (engine idle, load unknown, or ``limit_s`` 0), ``wait`` while busy under ``limit_s``, ``refuse`` after."""
    if limit_s <= 0 or load is None or not load.busy:
        return "go"
    return "wait" if waited_s < limit_s else "refuse"


def busy_refusal(load: EngineLoad, waited_s: float) -> str:
    """Why a run is refused, with the figure and what to do."""
    return (
        f"vLLM is still busy after {waited_s:.0f} s: {load.text()}, none of them this run's (another client's, "
        "or a stopped run's that vLLM has not aborted yet). Measured now, their load would count in this run's "
        "figures. Wait for them to end, stop that client, raise IDLE_WAIT_S, or set IDLE_WAIT_S=0 to measure "
        "alongside them. Nothing was sent."
    )
