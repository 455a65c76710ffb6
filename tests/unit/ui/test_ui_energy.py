"""The chat answer's energy: asked of the sidecar after the answer, shown in the timing line only when measured."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import httpx

from core.settings import Settings
from ui.answer_view import answer_markdown
from ui.status import BackendStatus
from ui.timing import ENERGY_LEGEND, NBSP, compute_timing, format_timing
from ui.turn import AnswerEnergy, ChatBackend, TurnResult, answer_energy, wall_bounds

TIMING = compute_timing(0.0, 0.1, 1.0, 10, 20)


def test_the_timing_line_shows_energy_only_when_measured() -> None:
    """``Energy: 12.3 J`` ends the line (non-breaking inside) with its legend; without a figure neither appears."""
    shown = replace(TIMING, energy_j=12.34)
    assert format_timing(shown).endswith(f"Energy:{NBSP}12.3{NBSP}J")
    assert ENERGY_LEGEND in answer_markdown("hi", shown, None, None)
    assert "Energy" not in format_timing(TIMING) and ENERGY_LEGEND not in answer_markdown("hi", TIMING, None, None)
    assert format_timing(replace(TIMING, energy_j=1234.0)).endswith(f"1,234{NBSP}J")


def test_wall_bounds_map_monotonic_stamps_to_unix_time() -> None:
    """An answer from monotonic 5.0 to 7.5 read at monotonic 8.0 / Unix 1000.0 ran from 997.0 to 999.5."""
    assert wall_bounds(5.0, 7.5, 8.0, 1000.0) == (997.0, 999.5)


def _client(handler: httpx.MockTransport) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=handler)


def test_answer_energy_asks_the_sidecar_for_the_answers_span() -> None:
    """GET /energy?start=&end= with the answer's bounds; its energy_j is the answer's energy."""
    asked: list[httpx.URL] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url)
        return httpx.Response(200, json={"energy_j": 42.5, "unavailable_reason": None})

    got = asyncio.run(answer_energy(_client(httpx.MockTransport(handler)), "http://sc:8200", (10.0, 12.0), 0.5,
                                    clock=lambda: 20.0))  # fmt: skip
    assert got == AnswerEnergy(42.5) and asked[0].path == "/energy" and dict(asked[0].params) == {"start": "10.0", "end": "12.0"}


def test_no_energy_is_none_never_an_error_and_pauses_the_asking() -> None:
    """A sidecar that cannot measure energy (no device) is not asked for 5 minutes; an error status, a bad body or no
    sidecar for a minute; a window without samples yet (devices, no figure) is asked again next time."""
    cases = [
        (httpx.Response(200, json={"energy_j": None, "devices": [], "unavailable_reason": "no NVML"}), 300.0),
        (httpx.Response(200, json={"energy_j": None, "devices": [{"device": "GPU 0"}]}), 0.0),
        (httpx.Response(500, text="boom"), 60.0),
        (httpx.Response(200, text="<html>"), 60.0),
    ]
    for answer, pause_s in cases:
        client = _client(httpx.MockTransport(lambda request, a=answer: a))
        found = asyncio.run(answer_energy(client, "http://sc:8200", (1.0, 2.0), 0.5, clock=lambda: 10.0))
        assert found == AnswerEnergy(None, pause_s)

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    client = _client(httpx.MockTransport(refuse))
    found = asyncio.run(answer_energy(client, "http://sc:8200", (1.0, 2.0), 0.5, clock=lambda: 10.0))
    assert found == AnswerEnergy(None, 60.0)


def test_the_backend_stops_asking_a_sidecar_without_energy(tmp_path: Path) -> None:
    """After the sidecar said it cannot measure energy, the next answers ask nothing (no wait, no request)."""
    asked: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        return httpx.Response(200, json={"energy_j": None, "devices": []})

    settings = Settings(_env_file=None, logs_dir=tmp_path, gpu_sample_interval_s=0.01)  # type: ignore[call-arg]
    backend = ChatBackend(settings, sidecar=_client(httpx.MockTransport(handler)))
    done = TurnResult("r", "hi", TIMING, None, None, BackendStatus(state="Ready", url="http://vllm"), bounds=(1.0, 2.0))
    assert asyncio.run(backend.answer_energy(done)) is None and asyncio.run(backend.answer_energy(done)) is None
    assert len(asked) == 1
