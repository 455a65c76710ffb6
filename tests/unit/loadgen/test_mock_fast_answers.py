"""The mock server's ``--fast-answers N``: the first N chat answers leave at once, the later ones on the ttft/itl
schedule (tests wait for their first rows without waiting out slow answers)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from core.net import free_port
from loadgen.selftest.mock_answers import MockConfig
from loadgen.selftest.mock_server import main, serve

BODY = {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 3}


def test_the_first_answers_leave_at_once_and_the_rest_on_the_schedule() -> None:
    """Three tokens 1 s apart: the first answer (fast) takes well under the schedule's 2 s, the second at least 2 s;
    both carry the whole stream."""
    port = free_port()

    async def timed() -> list[tuple[float, str]]:
        cfg = MockConfig(tokens=3, ttft_ms=0, itl_ms=1000, fast_answers=1)
        server = asyncio.create_task(serve(cfg, "127.0.0.1", port, reuse_port=False))
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                for _ in range(100):
                    try:
                        await client.get("/health")
                        break
                    except httpx.ConnectError:
                        await asyncio.sleep(0.05)
                out = []
                for _ in range(2):
                    started = time.monotonic()
                    text = (await client.post("/v1/chat/completions", json=BODY)).text
                    out.append((time.monotonic() - started, text))
                return out
        finally:
            server.cancel()

    (fast_s, fast), (paced_s, paced) = asyncio.run(timed())
    assert fast_s < 1.0 <= 2.0 <= paced_s, (fast_s, paced_s)
    assert fast.count('"content"') == paced.count('"content"') and fast.rstrip().endswith("data: [DONE]")


def test_fast_answers_with_metrics_is_refused() -> None:
    """Unpaced answers would be missing from the mock's /metrics: the two options together are a usage error."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--fast-answers", "2", "--metrics"])
    assert exit_info.value.code == 2
