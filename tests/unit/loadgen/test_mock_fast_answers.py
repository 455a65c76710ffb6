"""The mock server's ``--fast-answers N``: the first N chat answers leave at once, the later ones on the ttft/itl
schedule (tests wait for their first rows without waiting out slow answers)."""

from __future__ import annotations

import asyncio
import time

import pytest

from loadgen.selftest.mock_answers import MockConfig
from loadgen.selftest.mock_server import main
from tests.unit.loadgen.mock_in_loop import mock_client

BODY = {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 3}


def test_the_first_answers_leave_at_once_and_the_rest_on_the_schedule() -> None:
    """Three tokens 1 s apart: the first answer (fast) takes well under the schedule's 2 s, the second at least 2 s;
    both carry the whole stream."""
    async def timed() -> list[tuple[float, str]]:
        out = []
        async with mock_client(MockConfig(tokens=3, ttft_ms=0, itl_ms=1000, fast_answers=1), timeout_s=30) as client:
            for _ in range(2):
                started = time.monotonic()
                text = (await client.post("/v1/chat/completions", json=BODY)).text
                out.append((time.monotonic() - started, text))
        return out

    (fast_s, fast), (paced_s, paced) = asyncio.run(timed())
    assert fast_s < 1.0 <= 2.0 <= paced_s, (fast_s, paced_s)
    assert fast.count('"content"') == paced.count('"content"') and fast.rstrip().endswith("data: [DONE]")


def test_fast_answers_with_metrics_is_refused() -> None:
    """Unpaced answers would be missing from the mock's /metrics: the two options together are a usage error."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--fast-answers", "2", "--metrics"])
    assert exit_info.value.code == 2
