"""The client-limited judgement."""

from __future__ import annotations

import pytest

from core.clientview import Calibration, client_view
from core.records import RequestRecord

ROWS = [RequestRecord(request_id=str(i), started_at=0.0, ok=True, e2e_ms=10.0, content_chunks=100) for i in range(10)]
CAL = Calibration(
    chunks_per_sec_per_core=1000.0, requests_per_sec_per_core=50.0, added_ttft_ms=1.0, added_itl_ms=0.1, measured_at="t"
)


def test_busy_client_cpu_flags_the_run() -> None:
    """A Locust process near one full core marks the run client-limited."""
    view = client_view(ROWS, duration_s=10.0, cpu_cores=0.95, calibration=None)
    assert view.client_limited and view.cpu_cores_used == pytest.approx(0.95) and "CPU" in (view.reason or "")


def test_chunk_rate_near_calibrated_ceiling_flags_the_run() -> None:
    """Streaming ≥ 80 % of the calibrated chunks/s ceiling marks the run client-limited."""
    view = client_view(ROWS, duration_s=1.2, cpu_cores=0.05, calibration=CAL)
    assert view.client_limited and "calibrated" in (view.reason or "")


def test_light_client_is_not_limited() -> None:
    """Low CPU and chunk rate: not client-limited."""
    view = client_view(ROWS, duration_s=10.0, cpu_cores=0.1, calibration=CAL)
    assert not view.client_limited and view.reason is None and view.chunks_per_sec == 100.0
