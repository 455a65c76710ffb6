"""The sidecar's energy over HTTP: ``GET /energy`` (open, samples nothing; the chat UI's) and the peers' window."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from sidecar.sampling.peers import PeerTarget, fetch_peer
from sidecar.server import create_app
from tests.fakes import FakeNvml
from tests.unit.sidecar.test_sidecar_app import BASE_URL, make_service, make_settings


def test_energy_endpoint_gives_the_window_without_the_token(tmp_path: Path) -> None:
    """GET /energy answers without the sidecar token with the engine's energy over the span from the samples taken
    (the counter's 100 J rise inside it); a span that runs backwards is 400."""
    fake = FakeNvml(energy_mj=[1_000_000])
    settings = make_settings(tmp_path)
    service = make_service(settings, fake)
    client = TestClient(create_app(settings, service), base_url=BASE_URL)  # no token; no lifespan: no sampling thread
    service.sampler.sample_once()
    start = time.time()
    service.sampler.sample_once()
    fake.energy_mj = [1_100_000]
    service.sampler.sample_once()
    end = time.time()
    service.sampler.sample_once()
    answer = client.get("/energy", params={"start": start, "end": end})
    assert answer.status_code == 200, answer.text
    energy = answer.json()
    assert energy["scope"] == "GPUs of the engine (NVML)" and energy["devices"][0]["method"] == "nvml_energy_counter"
    assert energy["energy_j"] == pytest.approx(100.0)
    assert client.get("/energy", params={"start": 10.0, "end": 5.0}).status_code == 400


def test_peer_window_carries_the_idle_end() -> None:
    """The coordinator asks each peer for the run's window and where the idle span before it ends."""
    seen: list[httpx.URL] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url)
        return httpx.Response(200, json={"host": "gpu2", "energy": {"energy_j": 12.0}})

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        found = fetch_peer(client, PeerTarget("http://gpu2:8200", "http://gpu2:8200"), "t", 100.0, 110.0, 95.0)
    assert dict(seen[0].params) == {"start": "100.0", "end": "110.0", "idle_end": "95.0"}
    assert found.energy is not None and found.energy.energy_j == 12.0
