"""The sidecar under hostile load, as a real process (``python -m sidecar.server``, as ``make up`` starts
it): unauthenticated 60 MB writes are answered 401 before the client has sent them, and while 32 of them, oversized
authenticated writes (declared, or chunked), slow-loris bodies and a flood of small requests arrive, a real benchmark (real Locust against
the mock server) reports through the same sidecar: peak RSS within 100 MB of idle, health answers, the report is
written with every request."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from core.net import free_port
from core.settings import PROJECT_ROOT
from tests.integration.conftest import wait_http

pytestmark = pytest.mark.integration
APP_PY = str(PROJECT_ROOT / ".venvs/app/bin/python")
TOKEN = "hostile-test-token"
MB = 1_000_000
RSS_BOUND_MB = 100  # the stated bound: peak RSS over idle RSS under all of the load below


@dataclass
class Sidecar:
    """A sidecar and a mock server on free ports with their own folders; ``env`` runs a benchmark against them."""

    port: int
    proc: subprocess.Popen[bytes]
    env: dict[str, str]
    tmp: Path

    def rss_mb(self) -> float:
        """The sidecar's resident memory (with any children), MB."""
        root = psutil.Process(self.proc.pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / MB


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[Sidecar]:
    """The sidecar started the way the stack starts it, and a mock vLLM; both stopped at the end."""
    port, mock_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "SIDECAR_", "MODEL"))}
    env.update(
        SIDECAR_PORT=str(port), SIDECAR_TOKEN=TOKEN, LOGS_DIR=str(tmp_path / "logs"),
        REPORTS_DIR=str(tmp_path / "reports"), RUN_DIR=str(tmp_path / "run"),
        VLLM_BASE_URL=f"http://127.0.0.1:{mock_port}", WARMUP="0", MAX_TOKENS="20", PYTHONUNBUFFERED="1",
    )  # fmt: skip
    (tmp_path / "logs").mkdir()
    proc = subprocess.Popen([APP_PY, "-m", "sidecar.server"], cwd=PROJECT_ROOT, env=env,
                            stdout=(tmp_path / "sidecar.log").open("wb"), stderr=subprocess.STDOUT)  # fmt: skip
    mock = subprocess.Popen([APP_PY, "-m", "loadgen.selftest.mock_server", "--port", str(mock_port), "--tokens", "20",
                             "--ttft-ms", "100", "--itl-ms", "50"], cwd=PROJECT_ROOT,
                            stdout=(tmp_path / "mock.log").open("wb"), stderr=subprocess.STDOUT)  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 120)
        wait_http(f"http://127.0.0.1:{mock_port}/health", 60)
        yield Sidecar(port, proc, env, tmp_path)
    finally:
        for p in (mock, proc):
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=20)


def post_raw(
    port: int, total_bytes: int, token: str | None = None, chunked: bool = False, declared: int | None = None,
    pause_s: float = 0.0, stop: threading.Event | None = None,
) -> tuple[int | None, int]:
    """POST /reports over a plain socket, sending the body in 64 KiB pieces (``pause_s`` apart, 1 byte each when
    ``pause_s`` >= 1: slow loris) and watching for an answer between them; ``(status or None, body bytes sent when
    the answer came or the sending ended)``."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = ["POST /reports HTTP/1.1", f"Host: 127.0.0.1:{port}", "Content-Type: application/json"]
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {declared or total_bytes}")
    if token is not None:
        head.append(f"Authorization: Bearer {token}")
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    piece = b"x" if pause_s >= 1 else b"x" * 65536
    sent, answer = 0, b""
    sock.settimeout(0.5)
    try:
        while sent < total_bytes and not (stop is not None and stop.is_set()):
            if select.select([sock], [], [], pause_s)[0]:
                data = sock.recv(65536)
                answer += data
                if not data or b"\r\n" in answer:
                    break
            part = piece[: total_bytes - sent]
            framed = b"%x\r\n%s\r\n" % (len(part), part) if chunked else part
            try:
                sock.sendall(framed)
            except TimeoutError:
                continue  # the server is not reading (it paused, or it answered): look for the answer
            except OSError:
                break  # reset: the server answered and closed with the body unread; its answer is still readable
            sent += len(part)
        sock.settimeout(10)
        while b"\r\n" not in answer and not (stop is not None and stop.is_set()):
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    except OSError:  # reset after the answer: the server closed with the body unread
        pass
    finally:
        sock.close()
    status = answer.split(b" ", 2)[1] if answer.startswith(b"HTTP/1.1 ") else None
    return (int(status) if status is not None else None), sent


def test_unauthenticated_60mb_write_is_answered_401_before_it_is_sent(sidecar: Sidecar) -> None:
    """POST /reports without the token and with a 60 MB body: 401 comes while most of the body is still unsent (the
    server answered from the headers and closed), and the sidecar's memory does not move."""
    before_mb = sidecar.rss_mb()
    status, sent = post_raw(sidecar.port, 60 * MB)
    assert status == 401
    assert sent < 10 * MB, f"{sent / MB:.1f} MB sent before the answer"
    assert sidecar.rss_mb() - before_mb < 20
    wrong, _ = post_raw(sidecar.port, 60 * MB, token="not-the-token")
    assert wrong == 403


def test_hostile_load_leaves_memory_bounded_and_the_real_report_written(sidecar: Sidecar) -> None:
    """32 unauthenticated 60 MB writes at once, oversized authenticated writes (declared and chunked), slow-loris
    bodies and a flood of small requests, while a benchmark runs and reports: peak RSS within RSS_BOUND_MB of idle,
    every health probe answers, the report is written and counts every request."""
    url = f"http://127.0.0.1:{sidecar.port}"
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url, timeout=10) as client:  # warm the code paths before idle is measured
        for _ in range(5):
            client.get("/health"), client.get("/reports"), client.post("/windows/start", headers=auth)
    time.sleep(1)
    idle_samples_mb = []
    for _ in range(10):
        idle_samples_mb.append(sidecar.rss_mb())
        time.sleep(0.1)
    idle_mb = max(idle_samples_mb)
    stop = threading.Event()
    peak = [idle_mb]

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], sidecar.rss_mb())
            time.sleep(0.05)

    health: list[int] = []

    def probe() -> None:
        with httpx.Client(base_url=url, timeout=5) as client:
            while not stop.is_set():
                try:
                    health.append(client.get("/health").status_code)
                except httpx.HTTPError:
                    health.append(0)
                time.sleep(0.5)

    flood: Counter[int] = Counter()

    def small_requests() -> None:
        with httpx.Client(base_url=url, timeout=10) as client:
            while not stop.is_set():
                for method, path in (("GET", "/health"), ("POST", "/windows/start"), ("GET", "/reports")):
                    try:
                        flood[client.request(method, path).status_code] += 1
                    except httpx.HTTPError:
                        flood[0] += 1

    results: dict[str, list[tuple[int | None, int]]] = {"unauth": [], "declared": [], "chunked": [], "loris": []}

    def run(kind: str, **kwargs: object) -> threading.Thread:
        def target() -> None:
            results[kind].append(post_raw(sidecar.port, **kwargs))  # type: ignore[arg-type]

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        return thread

    background = [threading.Thread(target=f, daemon=True) for f in (sample, probe, small_requests, small_requests)]
    for thread in background:
        thread.start()
    bench = subprocess.Popen([APP_PY, "-m", "loadgen.command.benchmark"], cwd=PROJECT_ROOT, text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env={**sidecar.env, "CONCURRENCY": "2", "REQUESTS": "20"})  # fmt: skip
    lorises = [run("loris", total_bytes=1000, token=TOKEN, pause_s=1.0, stop=stop) for _ in range(2)]
    lorises += [run("loris", total_bytes=1000, pause_s=1.0, stop=stop) for _ in range(2)]
    attackers = [run("unauth", total_bytes=60 * MB) for _ in range(32)]
    attackers += [run("declared", total_bytes=100 * MB, token=TOKEN) for _ in range(4)]
    attackers += [run("chunked", total_bytes=70 * MB, token=TOKEN, chunked=True) for _ in range(2)]
    for thread in attackers:
        thread.join(timeout=180)
    try:
        out, err = bench.communicate(timeout=300)
    finally:
        stop.set()
        for thread in [*background, *lorises]:
            thread.join(timeout=15)
    assert bench.returncode == 0, f"{out[-3000:]}\n{err[-3000:]}"
    assert [s for s, _ in results["unauth"]] == [401] * 32
    assert all(sent < 60 * MB for _, sent in results["unauth"]), "each answered before its body was sent"
    assert [s for s, _ in results["declared"]] == [413] * 4
    assert all(sent < 100 * MB for _, sent in results["declared"])
    assert [s for s, _ in results["chunked"]] == [411] * 2  # a report's body is small and announced: no chunked writes
    assert {s for s, _ in results["loris"]} <= {None, 401}  # the token-less ones at once, the others pending
    assert health and set(health) == {200}, Counter(health)
    assert set(flood) <= {200, 401} and flood[200] > 0, flood
    line = next(x for x in out.splitlines() if x.startswith("[REPORT] Baseline saved to "))
    report = Path(line.removeprefix("[REPORT] Baseline saved to ").strip())
    metrics = json.loads(report.read_text(encoding="utf-8"))["metrics"]
    assert metrics["requests_total"] == 20, metrics
    grown_mb = peak[0] - idle_mb
    print(f"idle RSS {idle_mb:.0f} MB, peak {peak[0]:.0f} MB (+{grown_mb:.0f} MB); health probes {len(health)}, "
          f"flood answers {dict(flood)}")  # fmt: skip
    assert grown_mb <= RSS_BOUND_MB, f"peak RSS {peak[0]:.0f} MB is {grown_mb:.0f} MB over idle {idle_mb:.0f} MB"
