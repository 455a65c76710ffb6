"""The mock server in a test's own event loop, on a free loopback port, with a client once it answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

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
