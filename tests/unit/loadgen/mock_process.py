"""The mock server in a child process on a free loopback port, for tests whose client is gevent's (the request path):
it cannot share the test's thread with an asyncio server (:mod:`tests.unit.loadgen.mock_in_loop` is for those)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx

from core.net import free_port
from core.serverview_samples import parse_exposition


@contextmanager
def mock_process(*args: str, ready_s: float = 20.0) -> Iterator[str]:
    """``python -m loadgen.selftest.mock_server ARGS`` on a free port; yields its base URL once ``/health`` answers,
    and stops it when the block ends."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen.selftest.mock_server", "--port", str(port), *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_s
        while True:
            try:
                httpx.get(f"{url}/health", timeout=1.0).raise_for_status()
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    why = proc.stderr.read() if proc.stderr else b""
                    raise RuntimeError(f"mock server did not start: {why!r}") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def running(url: str) -> float:
    """The mock's ``vllm:num_requests_running`` now (it needs ``--metrics``)."""
    samples = parse_exposition(httpx.get(f"{url}/metrics", timeout=5.0).text)
    return sum(samples["vllm:num_requests_running"].values())


def running_in_gevent(url: str, wanted: float, within_s: float = 10.0) -> float:
    """:func:`running_after` for a test whose requests are gevent greenlets: it waits with ``gevent.sleep``, so they
    run meanwhile."""
    import gevent

    return running_after(url, wanted, within_s, sleep=gevent.sleep)


def running_after(
    url: str, wanted: float, within_s: float = 20.0, sleep: Callable[[float], object] = time.sleep
) -> float:
    """The mock's running requests once they are ``wanted``, or the last figure after ``within_s`` (polled every
    50 ms, waiting with ``sleep``)."""
    deadline = time.monotonic() + within_s
    now = running(url)
    while now != wanted and time.monotonic() < deadline:
        sleep(0.05)
        now = running(url)
    return now
