"""The mock server in a test's own event loop (or in a thread of its own, for synchronous clients), on a free
loopback port, with a client once it answers."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress

import httpx

from core.net import free_port
from loadgen.selftest.mock_answers import MockConfig
from loadgen.selftest.mock_server import serve


@asynccontextmanager
async def mock_client(cfg: MockConfig, timeout_s: float = 5.0) -> AsyncIterator[httpx.AsyncClient]:
    """An ``httpx.AsyncClient`` on a mock server of ``cfg`` (served in this loop) once its /health answers; the
    server stops when the block ends."""
    port = free_port()
    server = asyncio.create_task(serve(cfg, "127.0.0.1", port, reuse_port=False))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=timeout_s) as client:
            for _ in range(100):
                try:
                    await client.get("/health")
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.05)
            yield client
    finally:
        server.cancel()


@contextmanager
def mock_in_thread(cfg: MockConfig) -> Iterator[str]:
    """The mock server of ``cfg`` in a thread of its own (its own event loop), for synchronous clients: its base URL
    once ``/health`` answers; stopped (and the thread joined) when the block ends."""
    port = free_port()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, asyncio.Task[None]] = {}

    def run() -> None:
        asyncio.set_event_loop(loop)
        box["task"] = loop.create_task(serve(cfg, "127.0.0.1", port, reuse_port=False))
        started.set()
        with suppress(asyncio.CancelledError):
            loop.run_until_complete(box["task"])
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(5)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                httpx.get(f"{url}/health", timeout=1.0)
                break
            except httpx.ConnectError:
                time.sleep(0.05)
        yield url
    finally:
        loop.call_soon_threadsafe(box["task"].cancel)
        thread.join(5)
