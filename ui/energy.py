"""The energy of one chat answer, asked of the sidecar (``GET /energy?start=&end=``, open, samples nothing): what the
engine's GPUs (NVML) or the host's CPU packages (RAPL) used while the answer streamed. Any failure is None: the
timing line then shows no energy, and the chat goes on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx

MAX_WAIT_S = 1.0
"""Longest wait for the sidecar's next sample after the answer ended (its bound needs a sample after it), s."""


def wall_bounds(
    t0: float, end: float, clock_now: float, wall_now: float | None = None
) -> tuple[float, float]:
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
) -> float | None:
    """Joules over ``bounds`` (Unix s) from the sidecar, after waiting until it has sampled past the end (at most
    :data:`MAX_WAIT_S`); None when the sidecar is unreachable, answers otherwise, or has no energy figure."""
    wait_s = min(MAX_WAIT_S, bounds[1] + sample_interval_s - clock())
    if wait_s > 0:
        await asyncio.sleep(wait_s)
    try:
        answer = await http.get(f"{sidecar_url}/energy", params={"start": bounds[0], "end": bounds[1]})
        value = answer.json().get("energy_j") if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
