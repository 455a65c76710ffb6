"""The client's overhead over the server's own clock, against a mock that stamps vLLM's histograms and sends late.

The mock (``--metrics --send-delay-ms D``) records every event's time in vLLM's ``/metrics`` names and sends its
bytes D ms later. Measured by the real request function and judged by the cross-check's :func:`client_overhead`
between two real scrapes, the TTFT and E2E the client adds must grow by D while its ITL overhead stays put.
"""

from __future__ import annotations

import pytest

from core.serverview import client_overhead, overhead_text
from loadgen.orchestrate.replica_watch import scrape_metrics
from loadgen.request.client import chat_payload, new_session, stream_chat
from tests.integration.test_client_timing import start_mock

pytestmark = pytest.mark.integration


def added_ms(delay_ms: float) -> dict[str, float]:
    """What the client added to the mock's own TTFT, ITL and E2E over 6 requests (2 at a time), ms."""
    proc, url = start_mock("--metrics", "--send-delay-ms", str(delay_ms), "--tokens", "12", "--ttft-ms", "100",
                           "--itl-ms", "20")  # fmt: skip
    try:
        before, why = scrape_metrics(url)
        assert before is not None, why
        payload = chat_payload("mock-model", [{"role": "user", "content": "你好"}], max_tokens=12, temperature=0)
        sessions = [new_session(), new_session()]
        rows = [stream_chat(sessions[i % 2], url, payload, timeout_s=10) for i in range(6)]
        after, why = scrape_metrics(url)
        assert after is not None, why
        for session in sessions:
            session.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert all(r.ok for r in rows), [r.error for r in rows]
    overhead = client_overhead(before, after, rows, server_url=url)
    print(f"delay {delay_ms:.0f} ms: {overhead_text(overhead)}")
    assert overhead.missing is None
    return {f.name: f.added_ms for f in overhead.figures if f.added_ms is not None}


def test_added_latency_moves_with_the_servers_send_delay() -> None:
    """A server whose bytes leave 150 ms after its own stamps: TTFT and E2E overhead grow by ≈150 ms, ITL's does
    not; with no delay the client adds only a few ms (its own HTTP, parsing and scheduling)."""
    prompt = added_ms(0)
    late = added_ms(150)
    assert set(prompt) == set(late) == {"ttft", "itl", "e2e"}
    assert -1 <= prompt["ttft"] <= 40 and -1 <= prompt["e2e"] <= 40, prompt
    assert 130 <= late["ttft"] - prompt["ttft"] <= 190, (prompt, late)
    assert 130 <= late["e2e"] - prompt["e2e"] <= 190, (prompt, late)
    assert abs(late["itl"] - prompt["itl"]) <= 5 and abs(prompt["itl"]) <= 5, (prompt, late)
