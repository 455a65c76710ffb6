"""The request function's HTTP side on real sockets: keep-alive, a connection the server dropped, early hand-over of
the first bytes, timeouts, cut streams, refused connections, bodies that end with the connection.

A scripted server in a thread answers each request with the next scripted reply (bytes written with pauses).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from core.records import RequestRecord
from loadgen.request.client import chat_payload, new_session, stream_chat
from loadgen.request.transport import HttpSession

pytestmark = pytest.mark.integration

ROLE = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
USAGE = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}


def event(obj: object) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


def content(text: str, finish: str | None = None) -> bytes:
    return event({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]})


def chunked(*events: bytes) -> list[bytes]:
    return [b"%x\r\n%s\r\n" % (len(e), e) for e in events]


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
END = b"0\r\n\r\n"


@dataclass
class Reply:
    """What the server does with one request: write ``pieces`` (a float is a pause in seconds), then close the
    connection when ``close``; ``None`` pieces: read the request and never answer."""

    pieces: list[bytes | float] | None
    close: bool = False


def full_stream() -> Reply:
    return Reply([HEAD, *chunked(event(ROLE), content("a"), content("b", "length"), event(USAGE), b"data: [DONE]\n\n"),
                  END])


@dataclass
class ScriptedServer:
    """A TCP server answering requests with scripted replies, in order; counts connections and requests."""

    replies: list[Reply]
    connections: int = 0
    requests: int = 0
    sock: socket.socket = field(default_factory=socket.socket)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def serve(self) -> None:
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                self.requests += 1
                reply = self.replies.pop(0) if self.replies else full_stream()
                if reply.pieces is None:
                    time.sleep(30)
                    return
                for piece in reply.pieces:
                    if isinstance(piece, float):
                        time.sleep(piece)
                    else:
                        conn.sendall(piece)
                if reply.close:
                    return


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    """A scripted server; script it by appending to ``replies``."""
    srv = ScriptedServer([])
    srv.serve()
    yield srv
    srv.sock.close()


def ask(url: str, session: HttpSession | None = None, timeout_s: float = 5.0) -> RequestRecord:
    payload = chat_payload("m", [{"role": "user", "content": "你好"}], max_tokens=2, temperature=0.0)
    own = session or new_session()
    try:
        return stream_chat(own, url, payload, timeout_s=timeout_s)
    finally:
        if session is None:
            own.close()


def test_keep_alive_reuses_one_connection(server: ScriptedServer) -> None:
    """Three requests on one session travel on one TCP connection, each complete with the server's usage."""
    session = new_session()
    records = [ask(server.url, session) for _ in range(3)]
    session.close()
    assert all(r.ok and r.output_tokens == 2 and r.end_reason == "done" for r in records), records
    assert (server.connections, server.requests) == (1, 3)


def test_a_kept_connection_the_server_dropped_is_replaced_once(server: ScriptedServer) -> None:
    """The server closes a kept-alive connection on the next request without answering: the request is sent again
    on a fresh connection and succeeds."""
    server.replies += [full_stream(), Reply([], close=True), full_stream()]
    session = new_session()
    first, second = ask(server.url, session), ask(server.url, session)
    session.close()
    assert first.ok and second.ok, (first.error, second.error)
    assert (server.connections, server.requests) == (2, 3)


def test_first_bytes_are_handed_over_before_the_rest_arrives(server: ScriptedServer) -> None:
    """The first content chunk is timed when it arrives, not when a read buffer fills (the iter_content pitfall)."""
    rest = chunked(content("b", "length"), event(USAGE), b"data: [DONE]\n\n")
    server.replies.append(Reply([HEAD, *chunked(event(ROLE), content("a")), 0.4, *rest, END]))
    record = ask(server.url)
    assert record.ok and record.ttft_ms is not None and record.e2e_ms is not None
    assert record.ttft_ms < 200 and record.e2e_ms >= 400 and record.itl_ms[0] >= 390, record


def test_no_answer_within_the_timeout_is_a_timeout_row(server: ScriptedServer) -> None:
    """A server that reads the request and never answers costs one timeout row after REQUEST_TIMEOUT_S."""
    server.replies.append(Reply(None))
    started = time.monotonic()
    record = ask(server.url, timeout_s=0.5)
    assert not record.ok and record.error_kind == "timeout", record.error
    assert time.monotonic() - started < 5


def test_a_stream_cut_midway_is_a_connection_row_that_keeps_its_ttft(server: ScriptedServer) -> None:
    """The connection closes after the first chunk: the row says the stream broke and keeps the TTFT."""
    server.replies.append(Reply([HEAD, *chunked(event(ROLE), content("a"))], close=True))
    record = ask(server.url)
    assert not record.ok and record.error_kind == "connection" and "stream broken" in (record.error or "")
    assert record.ttft_ms is not None and record.content_chunks == 1


def test_refused_connection_is_a_connection_row() -> None:
    """Nothing listening: a connection row, no exception."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    record = ask(f"http://127.0.0.1:{port}")
    assert not record.ok and record.error_kind == "connection" and "refused" in (record.error or "").lower()


def test_a_body_that_ends_with_the_connection_is_complete_after_a_finish_reason(server: ScriptedServer) -> None:
    """No chunking and no length: the body ends when the server closes; after a finish_reason that is complete."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    server.replies.append(Reply([head, event(ROLE), content("a"), 0.05, content("b", "stop"), event(USAGE)], close=True))
    record = ask(server.url)
    assert record.ok and record.end_reason == "finish_then_close" and record.output_tokens == 2, record.error
