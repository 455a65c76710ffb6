"""The load generator's own load: CPU use during a run, streamed chunks/s, and the client-limited flag.

A benchmark whose client is saturated measures the client, not the server. ``make calibrate`` measures the
client's ceiling (chunks/s per core against a mock server with no delays) into ``logs/calibration.json``; every run
compares its own chunks/s and CPU use with it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from core.records import RequestRecord

CPU_LIMIT_CORES = 0.9  # one Locust process uses at most one core
CEILING_FRACTION = 0.8


class Calibration(BaseModel):
    """Ceiling and added latency of this load generator on this machine (``make calibrate``)."""

    chunks_per_sec_per_core: float
    requests_per_sec_per_core: float
    added_ttft_ms: float = Field(description="Median measured TTFT minus the mock server's configured TTFT.")
    added_itl_ms: float = Field(description="Median measured ITL minus the configured ITL.")
    measured_at: str


class ClientView(BaseModel):
    """Client resource use over the measured window."""

    cpu_cores_used: float | None = Field(description="Locust CPU seconds per wall second while requests completed.")
    chunks_per_sec: float
    requests_per_sec: float
    ceiling_chunks_per_sec_per_core: float | None
    client_limited: bool
    reason: str | None


def load_calibration(path: Path) -> Calibration | None:
    """The stored calibration, or None when missing or unreadable."""
    try:
        return Calibration.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None


def save_calibration(path: Path, calibration: Calibration) -> None:
    """Write the calibration atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(calibration.model_dump(), indent=2))
    tmp.replace(path)


def client_view(
    records: Sequence[RequestRecord], duration_s: float, cpu_cores: float | None, calibration: Calibration | None
) -> ClientView:
    """Judge whether the client limited the run (pure).

    Client-limited when the Locust process used ≥ 0.9 core, or streamed ≥ 80 % of its calibrated chunks/s ceiling.
    """
    measured = [r for r in records if r.phase == "measured"]
    chunks = sum(r.content_chunks for r in measured)
    per_s = 1.0 / duration_s if duration_s > 0 else 0.0
    cores = cpu_cores
    chunks_per_sec = chunks * per_s
    reasons = []
    if cores is not None and cores >= CPU_LIMIT_CORES:
        reasons.append(f"load generator used {cores:.2f} CPU cores (limit {CPU_LIMIT_CORES})")
    ceiling = calibration.chunks_per_sec_per_core if calibration else None
    if ceiling and chunks_per_sec >= CEILING_FRACTION * ceiling:
        reasons.append(f"{chunks_per_sec:.0f} chunks/s is ≥ {CEILING_FRACTION:.0%} of the calibrated {ceiling:.0f}")
    return ClientView(
        cpu_cores_used=cores,
        chunks_per_sec=chunks_per_sec,
        requests_per_sec=len(measured) * per_s,
        ceiling_chunks_per_sec_per_core=ceiling,
        client_limited=bool(reasons),
        reason="; ".join(reasons) or None,
    )
