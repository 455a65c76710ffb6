"""The sidecar's guard as an ASGI layer, driven in-process with hand-made ``receive``/``send`` (no sockets): refused
writes leave their body unread; a write's body is announced and small (no rows travel over HTTP)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from sidecar.guard import RequestGuard

TOKEN = "t0ken"
MIB = 1024 * 1024


def scope(method: str = "POST", token: str | None = None, length: int | None = None, chunked: bool = False) -> Scope:
    """An HTTP scope for ``/reports`` on a trusted host."""
    headers = [(b"host", b"127.0.0.1:8200"), (b"content-type", b"application/json")]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    if chunked:
        headers.append((b"transfer-encoding", b"chunked"))
    return {"type": "http", "method": method, "path": "/reports", "headers": headers, "query_string": b""}


class Client:
    """A client's side of one request: the body in chunks (``delay_s`` apart), how many were read, the answer."""

    def __init__(self, chunks: list[bytes], delay_s: float = 0.0) -> None:
        self.chunks = chunks
        self.delay_s = delay_s
        self.read = 0
        self.sent: list[Message] = []

    async def receive(self) -> Message:
        if self.read >= len(self.chunks):
            await asyncio.sleep(3600)  # nothing more until the client goes away
        await asyncio.sleep(self.delay_s)
        self.read += 1
        return {"type": "http.request", "body": self.chunks[self.read - 1], "more_body": self.read < len(self.chunks)}

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        return next(m["status"] for m in self.sent if m["type"] == "http.response.start")

    @property
    def headers(self) -> dict[str, str]:
        start = next(m for m in self.sent if m["type"] == "http.response.start")
        return {k.decode().lower(): v.decode() for k, v in start["headers"]}

    @property
    def detail(self) -> str:
        return str(json.loads(b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body"))
                   ["detail"])


def echo_app(seen: list[bytes], gate: asyncio.Event | None = None) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """An app that reads the whole body (recording it), waits for ``gate``, and answers 200."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen.append(body)
        if gate is not None:
            await gate.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


def run(middleware: RequestGuard, client: Client, sc: Scope) -> None:
    asyncio.run(middleware(sc, client.receive, client.send))


@pytest.mark.parametrize(("token", "status"), [(None, 401), ("wrong", 403)])
def test_unauthenticated_write_is_refused_with_its_body_unread(token: str | None, status: int) -> None:
    """A write without the token (or with another) is answered from its headers: not one chunk of the 60 MB body
    is received, the app never runs, and the answer closes the connection."""
    seen: list[bytes] = []
    client = Client([b"x" * MIB] * 60)
    run(RequestGuard(echo_app(seen), ["127.0.0.1"], 64 * MIB, TOKEN), client, scope(token=token, length=60 * MIB))
    assert client.status == status and client.read == 0 and seen == []
    assert client.headers["connection"] == "close"
    assert "SIDECAR_TOKEN" in client.detail or "wrong sidecar token" in client.detail


def test_no_configured_token_refuses_writes_unread() -> None:
    """Without a configured token a write is 503 before its body, never let through."""
    client = Client([b"{}"])
    run(RequestGuard(echo_app([]), ["127.0.0.1"], MIB, None), client, scope(token=TOKEN, length=2))
    assert client.status == 503 and client.read == 0


def test_declared_length_over_the_limit_is_413_unread() -> None:
    """An authenticated write whose Content-Length is over the limit is 413 with nothing read."""
    client = Client([b"x" * MIB] * 3)
    run(RequestGuard(echo_app([]), ["127.0.0.1"], 2 * MIB, TOKEN), client, scope(token=TOKEN, length=3 * MIB))
    assert client.status == 413 and client.read == 0 and "never its rows" in client.detail


def test_chunked_write_is_411_unread() -> None:
    """A chunked write (no Content-Length) is refused from its headers (411, the connection closed): no chunk is
    read and the app never runs, so no body of unknown size is ever received."""
    seen: list[bytes] = []
    client = Client([b"x" * (256 * 1024)] * 100)
    run(RequestGuard(echo_app(seen), ["127.0.0.1"], MIB, TOKEN), client, scope(token=TOKEN, chunked=True))
    assert client.status == 411 and client.read == 0 and seen == []
    assert client.headers["connection"] == "close" and "Content-Length" in client.detail


def test_allowed_write_reaches_the_app_whole() -> None:
    """An authenticated write within the limit is handed to the app as sent."""
    seen: list[bytes] = []
    client = Client([b'{"run_id": ', b'"20260101_120000"}'])
    run(RequestGuard(echo_app(seen), ["127.0.0.1"], MIB, TOKEN), client, scope(token=TOKEN, length=29))
    assert client.status == 200 and seen == [b'{"run_id": "20260101_120000"}']


def test_reads_pass_without_the_token() -> None:
    """GET requests are not writes: no token needed, the app runs."""
    client = Client([b""])
    called: list[Any] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        called.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    run(RequestGuard(app, ["127.0.0.1"], MIB, TOKEN), client, scope(method="GET"))
    assert client.status == 200 and called == ["/reports"]
