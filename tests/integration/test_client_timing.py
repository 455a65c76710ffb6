"""Every client path measured against a mock server with known timings (TTFT 400 ms, then 19 chunks 50 ms apart).

Expected: TTFT ≈ 400 ms and E2E ≈ 400 + 19 × 50 = 1350 ms. A client that hands over the body only at the end (or
waits to fill a read buffer: the known ``iter_content``/``read(n)`` pitfall) would show TTFT ≈ E2E. The paths: the
request function itself, the benchmark's warmup (threads), and the benchmark's Locust run (closed and open loop) with
one process and with two worker processes. And against vLLM's own shapes (``vllm_shaped_url``): the role chunk in the
first token's write and tokens whose text vLLM's detokenizer holds back sent as ``"content": ""`` — the first token
among them — which a client that waits for text times one token late (TTFT +50 ms here, one gap merged away).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from core.net import free_port
from core.records import RequestRecord
from core.report_schema import BenchmarkConfig
from core.settings import PROJECT_ROOT, Settings
from loadgen.orchestrate.locust_run import read_process_loads, run_locust
from loadgen.orchestrate.measured_run import read_records, warmup
from loadgen.request.client import chat_payload, new_session, stream_chat

pytestmark = [pytest.mark.integration, pytest.mark.load_sensitive]  # known timings: runs when the fewest processes load the host
PY = str(PROJECT_ROOT / ".venvs/app/bin/python")



def start_mock(*args: str) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m loadgen.selftest.mock_server ARGS`` on a free port, once it answers /health."""
    port = free_port()
    proc = subprocess.Popen([PY, "-m", "loadgen.selftest.mock_server", "--port", str(port), *args], cwd=PROJECT_ROOT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    return proc, url


@pytest.fixture(scope="module")
def mock_url() -> Iterator[str]:
    """A mock OpenAI streaming server in its own process (TTFT 400 ms, 20 tokens 50 ms apart)."""
    proc, url = start_mock("--tokens", "20", "--ttft-ms", "400", "--itl-ms", "50")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def vllm_shaped_url() -> Iterator[str]:
    """The same timings in vLLM's shapes: role chunk with the first token, tokens 0 and 7 without text yet."""
    proc, url = start_mock("--tokens", "20", "--ttft-ms", "400", "--itl-ms", "50", "--role-with-first",
                           "--held-back", "0,7")  # fmt: skip
    try:
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


def plan_for(url: str, tmp_path: Path, **kw: object) -> BenchmarkConfig:
    base: dict[str, object] = dict(concurrency=3, requests=6, warmup_requests=0, max_tokens=20, temperature=0.0,
                                   dataset="loadgen/workloads/data/prompts_zh.jsonl", seed=0, vllm_url=url, model="mock-model",
                                   request_timeout_s=30.0, drain_s=5.0)  # fmt: skip
    return BenchmarkConfig(**{**base, **kw})  # type: ignore[arg-type]


def settings_for(url: str, tmp_path: Path) -> Settings:
    return Settings(_env_file=None, vllm_base_url=url, logs_dir=tmp_path / "logs")  # type: ignore[call-arg]


def test_request_function_timings(mock_url: str) -> None:
    """The shared request function measures TTFT and E2E as the server paced them, and reuses its connection."""
    payload = chat_payload("mock-model", [{"role": "user", "content": "你好"}], max_tokens=20, temperature=0)
    session = new_session()
    try:
        for _ in range(2):
            assert_known_timings(stream_chat(session, mock_url, payload, timeout_s=10))
    finally:
        session.close()


def test_request_function_times_vllms_shapes(vllm_shaped_url: str) -> None:
    """Tokens without text yet are timed where the server sent them: TTFT at the first token, 19 gaps, 20 tokens."""
    payload = chat_payload("mock-model", [{"role": "user", "content": "你好"}], max_tokens=20, temperature=0)
    session = new_session()
    try:
        for _ in range(2):
            assert_known_timings(stream_chat(session, vllm_shaped_url, payload, timeout_s=10))
    finally:
        session.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_locust_path_times_vllms_shapes(vllm_shaped_url: str, tmp_path: Path, workers: int) -> None:
    """The Locust run (one process, two workers) times vLLM's shapes the same way."""
    plan = plan_for(vllm_shaped_url, tmp_path, workers=workers)
    rows_path = tmp_path / "run.requests.jsonl"
    rows_path.touch()
    outcome = run_locust(settings_for(vllm_shaped_url, tmp_path), plan, rows_path)
    rows, bad = read_records(rows_path)
    assert outcome.code == 0 and len(rows) == 6 and bad == 0, (tmp_path / "run.locust.log").read_text()[-3000:]
    for row in rows:
        assert_known_timings(row)


def test_warmup_path_timings(mock_url: str, tmp_path: Path) -> None:
    """The benchmark's warmup (threads, one session each) records the known timings as warmup rows."""
    rows_path = tmp_path / "rows.jsonl"
    done = warmup(plan_for(mock_url, tmp_path, warmup_requests=4, concurrency=2), rows_path)
    rows, bad = read_records(rows_path)
    assert len(done) == len(rows) == 4 and bad == 0
    for row in rows:
        assert row.phase == "warmup"
        assert_known_timings(row)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("mode", ["closed", "open"])
def test_locust_path_timings(mock_url: str, tmp_path: Path, mode: str, workers: int) -> None:
    """The benchmark's Locust run, closed and open loop, in one process or two workers: exactly REQUESTS rows, each
    with the known timings, and one load report per process."""
    extra = {"rate_req_per_sec": 4.0, "mode": "open_loop", "burstiness": 1.0} if mode == "open" else {}
    plan = plan_for(mock_url, tmp_path, workers=workers, **extra)
    rows_path = tmp_path / "run.requests.jsonl"
    rows_path.touch()
    outcome = run_locust(settings_for(mock_url, tmp_path), plan, rows_path)
    rows, bad = read_records(rows_path)
    log = (tmp_path / "run.locust.log").read_text()[-3000:]
    assert outcome.code == 0 and outcome.stopped is None, log
    assert len(rows) == 6 and bad == 0, log
    for row in rows:
        assert_known_timings(row)
        if mode == "open":
            assert row.scheduled_at is not None and row.queue_delay_ms < 500
    loads = read_process_loads(tmp_path / "run.client.jsonl")
    assert [p.slot for p in loads] == list(range(workers))
    assert {p.role for p in loads} == {"local" if workers == 1 else "worker"}
    assert sum(p.requests for p in loads) == 6 and all(p.lag.count > 0 and p.cpu_s > 0 for p in loads)
    assert outcome.processes == loads
    output = (tmp_path / "run.locust.log").read_text()
    assert "LLM" in output and "e2e" in output and "TTFT (time to first token)" in output  # the end-of-run tables
