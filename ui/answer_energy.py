"""The energy of one chat answer, asked of the sidecar (``GET /energy?start=&end=``, open, samples nothing): what the
engine's GPUs (NVML) or the host's CPU packages (RAPL) used while the answer streamed. Any failure is None: the
timing line then shows no energy, and the chat goes on. A sidecar that cannot measure energy here (no NVML, no
readable RAPL), or cannot be reached, is not asked again for a while."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

MAX_WAIT_S = 1.0
"""Longest wait for the sidecar's next sample after the answer ended (its bound needs a sample after it), s."""
UNAVAILABLE_PAUSE_S = 300.0
"""How long the UI stops asking a sidecar that said it cannot measure energy, s."""
UNREACHABLE_PAUSE_S = 60.0
"""How long it stops asking a sidecar that could not be reached or answered otherwise, s."""


@dataclass(frozen=True)
class AnswerEnergy:
    """The answer's energy (None: none shown) and how long not to ask again (0: ask next time)."""

    energy_j: float | None
    pause_s: float = 0.0


def wall_bounds(t0: float, end: float, clock_now: float, wall_now: float | None = None) -> tuple[float, float]:
    """An answer's ``(start, end)`` in Unix seconds from its monotonic stamps (``t0``, ``end``) and the monotonic
    clock's reading ``clock_now`` taken with the wall clock's ``wall_now`` (default: now)."""
    wall = time.time() if wall_now is None else wall_now
    return wall - (clock_now - t0), wall - (clock_now - end)


async def answer_energy(
    http: httpx.AsyncClient,
    sidecar_url: str,
    bounds: tuple[float, float],
    sample_interval_s: float,
    clock: Callable[[], float] = time.time,
) -> AnswerEnergy:
    """Joules over ``bounds`` (Unix s) from the sidecar, after waiting until it has sampled past the end (at most
    :data:`MAX_WAIT_S`); None when it has no figure (pausing :data:`UNAVAILABLE_PAUSE_S` when it says it cannot
    measure energy at all) or cannot be asked (pausing :data:`UNREACHABLE_PAUSE_S`)."""
    wait_s = min(MAX_WAIT_S, bounds[1] + sample_interval_s - clock())
    if wait_s > 0:
        await asyncio.sleep(wait_s)
    try:
        answer = await http.get(f"{sidecar_url}/energy", params={"start": bounds[0], "end": bounds[1]})
        body = answer.json() if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return AnswerEnergy(None, UNREACHABLE_PAUSE_S)
    if not isinstance(body, dict):
        return AnswerEnergy(None, UNREACHABLE_PAUSE_S)
    value = body.get("energy_j")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return AnswerEnergy(float(value))
    return AnswerEnergy(None, UNAVAILABLE_PAUSE_S if not body.get("devices") else 0.0)
