"""The sidecar's guard as an ASGI layer, driven in-process with hand-made ``receive``/``send`` (no sockets): refused
writes leave their body unread, bodies are spooled and cut at the limit, slow ones are cut at the deadline, large
ones are admitted a few at a time, and the memory of a large one is given back."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from sidecar import bodyspool, guard
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
    assert client.status == 413 and client.read == 0 and "SIDECAR_MAX_BODY_MB" in client.detail


def test_chunked_body_is_cut_at_the_limit() -> None:
    """A chunked body is counted as it arrives: reading stops at the first chunk past the limit (413), the rest is
    never received and the app never runs."""
    seen: list[bytes] = []
    client = Client([b"x" * (256 * 1024)] * 100)
    run(RequestGuard(echo_app(seen), ["127.0.0.1"], MIB, TOKEN), client, scope(token=TOKEN, chunked=True))
    assert client.status == 413 and client.read == 5 and seen == []
    assert client.headers["connection"] == "close"


def test_allowed_body_reaches_the_app_whole_through_a_disk_spool(monkeypatch: pytest.MonkeyPatch) -> None:
    """An allowed 3 MiB body is spooled (on disk past the memory part) and handed to the app byte for byte; the
    memory is given back after it."""
    trimmed: list[bool] = []
    monkeypatch.setattr(guard, "give_back_memory", lambda: trimmed.append(True))
    rolled: list[bool] = []
    real_replay = bodyspool.SpooledBody.replay

    def spy(self: bodyspool.SpooledBody, receive: Receive) -> Receive:
        rolled.append(bool(getattr(self.file, "_rolled", False)))
        return real_replay(self, receive)

    monkeypatch.setattr(bodyspool.SpooledBody, "replay", spy)
    payload = bytes(range(256)) * (3 * MIB // 256)
    seen: list[bytes] = []
    client = Client([payload[i : i + 65536] for i in range(0, len(payload), 65536)])
    run(RequestGuard(echo_app(seen), ["127.0.0.1"], 8 * MIB, TOKEN), client, scope(token=TOKEN, length=len(payload)))
    assert client.status == 200 and seen == [payload]
    assert rolled == [True] and trimmed == [True]


def test_small_write_is_not_trimmed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A small write is handed over from memory and costs no garbage collection."""
    trimmed: list[bool] = []
    monkeypatch.setattr(guard, "give_back_memory", lambda: trimmed.append(True))
    seen: list[bytes] = []
    client = Client([b'{"a":', b"1}"])
    run(RequestGuard(echo_app(seen), ["127.0.0.1"], MIB, TOKEN), client, scope(token=TOKEN, length=7))
    assert client.status == 200 and seen == [b'{"a":1}'] and trimmed == []


def test_slow_body_is_cut_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A body arriving a byte at a time is cut at BODY_DEADLINE_S (408, connection closed), the app never runs."""
    monkeypatch.setattr(bodyspool, "BODY_DEADLINE_S", 0.3)
    seen: list[bytes] = []
    client = Client([b"x"] * 1000, delay_s=0.05)
    run(RequestGuard(echo_app(seen), ["127.0.0.1"], MIB, TOKEN), client, scope(token=TOKEN, length=1000))
    assert client.status == 408 and seen == [] and 3 <= client.read <= 8
    assert client.headers["connection"] == "close"


def test_large_writes_wait_their_turn_then_get_503_with_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    """With one large write in the app, a second waits for ADMISSION_WAIT_S and is answered 503 with Retry-After; a
    small write passes meanwhile; once the first is done the next large one is admitted."""
    monkeypatch.setattr(bodyspool, "LARGE_WRITES_AT_ONCE", 1)
    monkeypatch.setattr(bodyspool, "ADMISSION_WAIT_S", 0.2)
    monkeypatch.setattr(guard, "give_back_memory", lambda: None)
    big = [b"y" * MIB, b"y" * MIB]

    async def scenario() -> tuple[Client, Client, Client, Client]:
        gate = asyncio.Event()
        seen: list[bytes] = []
        middleware = RequestGuard(echo_app(seen, gate), ["127.0.0.1"], 8 * MIB, TOKEN)
        first, second, small, third = Client(big), Client(big), Client([b"{}"]), Client(big)
        holder = asyncio.create_task(middleware(scope(token=TOKEN, length=2 * MIB), first.receive, first.send))
        while not seen:
            await asyncio.sleep(0.01)
        await middleware(scope(token=TOKEN, length=2 * MIB), second.receive, second.send)
        small_task = asyncio.create_task(middleware(scope(token=TOKEN, length=2), small.receive, small.send))
        while len(seen) < 2:
            await asyncio.sleep(0.01)
        gate.set()
        await holder
        await small_task
        await middleware(scope(token=TOKEN, length=2 * MIB), third.receive, third.send)
        return first, second, small, third

    first, second, small, third = asyncio.run(scenario())
    assert second.status == 503 and second.headers["retry-after"] == str(bodyspool.RETRY_AFTER_S)
    assert "try again" in second.detail
    assert (first.status, small.status, third.status) == (200, 200, 200)


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


def test_give_back_memory_runs_here() -> None:
    """gc + malloc_trim run on this platform without error (glibc here; a no-op elsewhere)."""
    bodyspool.give_back_memory()
