"""Every client path measured against a mock server with known timings (TTFT 400 ms, then 19 chunks 50 ms apart).

Expected: TTFT ≈ 400 ms and E2E ≈ 400 + 19 × 50 = 1350 ms. A client that hands over the body only at the end
(a known pitfall) would show TTFT ≈ E2E.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import requests

from core.records import RequestRecord
from core.settings import PROJECT_ROOT
from loadtest.client import chat_payload, stream_chat

pytestmark = pytest.mark.integration
PY = str(PROJECT_ROOT / ".venvs/app/bin/python")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def mock_url() -> Iterator[str]:
    """A mock OpenAI streaming server in its own process."""
    port = free_port()
    proc = subprocess.Popen(
        [PY, "-m", "loadtest.mock_server", "--port", str(port), "--tokens", "20", "--ttft-ms", "400", "--itl-ms", "50"],
        cwd=PROJECT_ROOT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def assert_known_timings(record: RequestRecord) -> None:
    assert record.ok, record.error
    assert record.ttft_ms is not None and record.e2e_ms is not None
    # Lower bounds are exact (the server cannot be faster than its pacing); upper bounds leave room for a loaded
    # machine but still fail a client that hands the body over late (then TTFT ≈ E2E and the gaps vanish).
    assert 390 <= record.ttft_ms <= 1000, record.ttft_ms
    assert record.e2e_ms - record.ttft_ms >= 19 * 50 * 0.95, (record.ttft_ms, record.e2e_ms)
    assert record.e2e_ms >= 1340, record.e2e_ms
    assert record.output_tokens == 20 and record.content_chunks == 20
    assert len(record.itl_ms) == 19 and 45 <= sorted(record.itl_ms)[9] <= 150


def test_request_function_timings(mock_url: str) -> None:
    """The shared request function (warmup path) measures TTFT and E2E as the server paced them."""
    payload = chat_payload("mock-model", [{"role": "user", "content": "你好"}], max_tokens=20, temperature=0)
    with requests.Session() as session:
        assert_known_timings(stream_chat(session, mock_url, payload, timeout_s=10))


@pytest.mark.parametrize("mode", ["closed", "open"])
def test_locust_path_timings(mock_url: str, tmp_path: Path, mode: str) -> None:
    """Closed-loop and open-loop Locust runs record the same known timings for every request."""
    records = tmp_path / "rows.jsonl"
    env_extra = {"RATE": "4"} if mode == "open" else {}
    user = "OpenLoopUser" if mode == "open" else "ChatUser"
    run = subprocess.run(
        [
            PY,
            "-m",
            "locust",
            "-f",
            "loadtest/locustfile.py",
            "--host",
            mock_url,
            "--headless",
            "-u",
            "1" if mode == "open" else "3",
            "-r",
            "10",
            "--only-summary",
            "--records-file",
            str(records),
            "--max-requests",
            "6",
            "-t",
            "60s",
            user,
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MAX_TOKENS": "20", **env_extra},
    )
    rows = [RequestRecord.model_validate(json.loads(line)) for line in records.read_text().splitlines()]
    assert len(rows) == 6, run.stdout[-2000:] + run.stderr[-2000:]
    for row in rows:
        assert_known_timings(row)
        if mode == "open":
            assert row.scheduled_at is not None and row.queue_delay_ms < 500
    output = run.stdout + run.stderr
    assert "LLM" in output and "e2e" in output and "TTFT (time to first token)" in output  # the end-of-run tables
