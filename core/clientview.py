"""The load generator's own load: CPU per process, event-loop lag, chunks/s, and the client-limited flag.

A run is client-limited when the loop lag's p50/p99 exceed :data:`LAG_LIMIT_PCT` of the median/p99 TTFT or ITL, a
load process used >= :data:`CPU_LIMIT_CORES` of a core, or it streamed >= 80 % of the calibrated chunks/s
(``make calibrate``, ``logs/calibration.json``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field, computed_field

from core.atomicfile import atomic_write
from core.records import LatencyStats, RequestRecord

CPU_LIMIT_CORES = 0.9  # one Locust process uses at most one core
CEILING_FRACTION = 0.8
LAG_LIMIT_PCT = 10.0  # the client's lateness may move TTFT/ITL (p50 or p99) by at most this share


class CalibrationRun(BaseModel):
    """One ceiling run of ``make calibrate``."""

    name: str
    workers: int
    chunks_per_sec: float
    requests_per_sec: float
    client_cores: float = Field(description="Mean cores of the Locust process tree over the run's window.")
    mock_cores: float | None = Field(description="Mean cores of the mock server over the window.")
    chunks_per_sec_per_core: float
    requests_per_sec_per_core: float


class Calibration(BaseModel):
    """Ceiling and added latency of this load generator on this machine (``make calibrate``)."""

    chunks_per_sec_per_core: float
    requests_per_sec_per_core: float
    added_ttft_ms: float = Field(description="Median measured TTFT minus the mock server's configured TTFT.")
    added_itl_ms: float = Field(description="Median measured ITL minus the configured ITL.")
    measured_at: str
    tokens_per_chunk: int = Field(default=1, description="Tokens per event of the mock's answers.")
    runs: list[CalibrationRun] = Field(default_factory=list, description="Every ceiling run, 1 and N workers.")


class ProcessLoad(BaseModel):
    """One load-generating Locust process over its test (``make benchmark`` writes one per process)."""

    pid: int
    role: Literal["local", "worker"] = Field(description="local: the only Locust process; worker: one of WORKERS.")
    host: str | None = Field(default=None, description="The host it ran on (LOAD_HOST_NAME, else its host name).")
    slot: int = Field(description="Its place among the load processes (0-based).")
    requests: int = Field(description="Requests it finished.")
    cpu_s: float = Field(description="CPU seconds (user + system) from the test's start to its end.")
    wall_s: float = Field(description="Wall seconds from the test's start to its end.")
    lag: LatencyStats = Field(description="How late its event loop woke while requests were in flight, ms.")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cpu_cores(self) -> float:
        """Mean cores it used (cpu_s / wall_s)."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


class LagImpact(BaseModel):
    """How much the client's lateness could have moved one latency figure."""

    figure: str = Field(description="ttft_p50_ms, ttft_p99_ms, itl_p50_ms or itl_p99_ms.")
    value_ms: float = Field(description="The figure as measured.")
    lag_ms: float = Field(description="The lag at the same percentile (worst load process).")
    share_pct: float = Field(description="lag_ms / value_ms, %.")


class ClientView(BaseModel):
    """Client resource use and lateness over the measured window."""

    cpu_cores_used: float | None = Field(
        description="CPU seconds per wall second of all Locust processes (master included) while requests completed."
    )
    chunks_per_sec: float
    requests_per_sec: float
    ceiling_chunks_per_sec_per_core: float | None
    client_limited: bool
    reason: str | None
    workers: int = Field(default=1, description="Load-generating Locust processes (WORKERS; 1 = no master).")
    processes: list[ProcessLoad] = Field(default_factory=list, description="Each load process's CPU and lag.")
    lag_p50_ms: float | None = Field(default=None, description="Median event-loop lag, worst load process, ms.")
    lag_p99_ms: float | None = Field(default=None, description="p99 event-loop lag, worst load process, ms.")
    lag_max_ms: float | None = Field(default=None, description="Longest event-loop stall, ms.")
    lag_impact: list[LagImpact] = Field(
        default_factory=list, description="How much the lag could have moved TTFT and ITL (p50 by the median lag, p99 "
        "by the p99 lag)."
    )
    lag_limit_pct: float = Field(default=LAG_LIMIT_PCT, description="Largest share of lag_impact allowed, %.")


def load_calibration(path: Path) -> Calibration | None:
    """The stored calibration, or None when missing or unreadable."""
    try:
        return Calibration.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None


def save_calibration(path: Path, calibration: Calibration) -> None:
    """Write the calibration atomically."""
    atomic_write(path, json.dumps(calibration.model_dump(), indent=2))


def client_lag_ms(processes: Sequence[ProcessLoad]) -> float | None:
    """The worst load process's mean event-loop lag while requests were in flight, ms; None: none."""
    return max((p.lag.mean_ms for p in processes if p.lag.count and p.lag.mean_ms is not None), default=None)


def share_text(pct: float) -> str:
    """``481%`` from 10 % up, ``2.3%`` below, ``>1000%`` above that (a figure near 0 ms makes any lag huge)."""
    if pct > 1000:
        return ">1000%"
    return f"{pct:.0f}%" if pct >= 10 else f"{pct:.1f}%"


def lag_impact(records: Sequence[RequestRecord], lag_p50_ms: float, lag_p99_ms: float) -> list[LagImpact]:
    """The share of measured TTFT and ITL (p50, p99) the lag could account for (0 ms counts 0.001 ms)."""
    ok = [r for r in records if r.ok]
    out = []
    for name, values in (
        ("ttft", [r.ttft_ms for r in ok if r.ttft_ms is not None]),
        ("itl", [gap for r in ok for gap in r.itl_ms]),
    ):
        if not values:
            continue
        p50, p99 = (float(v) for v in np.percentile(np.asarray(values, dtype=float), [50, 99]))
        for pct, value, lag in (("p50", p50, lag_p50_ms), ("p99", p99, lag_p99_ms)):
            share = 100.0 * lag / max(value, 0.001)
            out.append(LagImpact(figure=f"{name}_{pct}_ms", value_ms=value, lag_ms=lag, share_pct=share))
    return out


def client_view(
    records: Sequence[RequestRecord],
    duration_s: float,
    cpu_cores: float | None,
    calibration: Calibration | None,
    processes: Sequence[ProcessLoad] = (),
    workers: int = 1,
) -> ClientView:
    """Judge whether the client limited the run (rules in the module docstring) from its rows (the measured ones are
    judged) over the ``duration_s`` window, the Locust tree's ``cpu_cores`` (None: not measured), ``make calibrate``'s
    figures and each of the ``workers`` load processes' self-reported load."""
    measured = [r for r in records if r.phase == "measured"]
    chunks = sum(r.content_chunks for r in measured)
    per_s = 1.0 / duration_s if duration_s > 0 else 0.0
    chunks_per_sec = chunks * per_s
    reasons = []
    busy = [p for p in processes if p.cpu_cores >= CPU_LIMIT_CORES]
    if busy:
        worst = max(busy, key=lambda p: p.cpu_cores)
        reasons.append(f"a load process used {worst.cpu_cores:.2f} CPU cores (limit {CPU_LIMIT_CORES} per process)")
    elif not processes and cpu_cores is not None and cpu_cores >= CPU_LIMIT_CORES * workers:
        reasons.append(f"load generator used {cpu_cores:.2f} CPU cores (limit {CPU_LIMIT_CORES} per process)")
    ceiling = calibration.chunks_per_sec_per_core if calibration else None
    if ceiling and chunks_per_sec >= CEILING_FRACTION * ceiling * workers:
        reasons.append(
            f"{chunks_per_sec:.0f} chunks/s is ≥ {CEILING_FRACTION:.0%} of the calibrated {ceiling * workers:.0f}"
        )
    lagged = [p.lag for p in processes if p.lag.count]
    lag50 = max((s.p50_ms or 0.0 for s in lagged), default=None)
    lag99 = max((s.p99_ms or 0.0 for s in lagged), default=None)
    impact = lag_impact(measured, lag50, lag99) if lag50 is not None and lag99 is not None else []
    over = [i for i in impact if i.share_pct > LAG_LIMIT_PCT]
    if over:
        worst_impact = max(over, key=lambda i: i.share_pct)
        reasons.append(
            f"the client's event loop ran late (lag p50 {lag50:.2f} ms, p99 {lag99:.2f} ms): that could have moved "
            f"{worst_impact.figure.removesuffix('_ms').replace('_', ' ')} ({worst_impact.value_ms:.2f} ms) by "
            f"{worst_impact.lag_ms:.2f} ms = {share_text(worst_impact.share_pct)} (limit {LAG_LIMIT_PCT:g}%)"
        )
    return ClientView(
        cpu_cores_used=cpu_cores,
        chunks_per_sec=chunks_per_sec,
        requests_per_sec=len(measured) * per_s,
        ceiling_chunks_per_sec_per_core=ceiling,
        client_limited=bool(reasons),
        reason="; ".join(reasons) or None,
        workers=workers,
        processes=list(processes),
        lag_p50_ms=lag50,
        lag_p99_ms=lag99,
        lag_max_ms=max((s.max_ms or 0.0 for s in lagged), default=None),
        lag_impact=impact,
    )
