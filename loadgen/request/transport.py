"""HTTP/1.1 for the request function: keep-alive connections, response bodies handed over as each read arrives.

geventhttpclient's pool and C parser (llhttp): each ``recv`` (up to 64 KiB) is yielded de-chunked at once, never
waiting to fill a block (``read(n)`` would delay the first token). gevent sockets cooperate inside Locust and block
plainly in a thread (the warmup). The request function sees only :class:`Transport` (a fake serves unit tests).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Protocol
from urllib.parse import urlsplit

from geventhttpclient.connectionpool import ConnectionPool, SSLConnectionPool
from geventhttpclient.response import HTTPParseError, HTTPResponse

BLOCK_BYTES = 64 * 1024
CONNECT_TIMEOUT_S = 10.0
TERMINATOR_WAIT_S = 5.0  # after data: [DONE], how long the end of the HTTP body may take before the socket is dropped


class TransportError(Exception):
    """The connection could not be made or broke (refused, reset, closed early, not HTTP)."""


class TransportTimeout(TransportError):
    """No connection, or no byte of the answer, within the timeout."""


class Response(Protocol):
    """An answer whose body is read as it arrives."""

    status: int

    def blocks(self) -> Iterator[bytes]:
        """Body bytes (de-chunked), one item per network read.

        Raises:
            TransportTimeout: no byte within the request's timeout. TransportError: the connection broke.
        """

    def read_body(self, limit: int = BLOCK_BYTES) -> bytes:
        """The rest of the body, at most ``limit`` bytes."""

    def close(self, reuse: bool) -> None:
        """Keep the connection alive when ``reuse`` and the body ended cleanly; else close it."""


class Transport(Protocol):
    """What the request function needs from HTTP: a POST whose answer streams."""

    def post(self, url: str, body: bytes, *, timeout_s: float, on_send: Callable[[], None] | None = None) -> Response:
        """Send ``body`` (JSON) to ``url``; return once the answer's headers are in. ``on_send`` runs right before
        the bytes leave (again for a replaced stale connection), so connecting is not counted as server latency.

        Raises:
            TransportTimeout: no connection or no answer within ``timeout_s``. TransportError: anything else.
        """

    def close(self) -> None:
        """Close every idle connection."""


class _Parser(HTTPResponse):
    """geventhttpclient's response parser, collecting body bytes in one buffer until they are taken."""

    def __init__(self) -> None:
        super().__init__(method="POST")
        self.body = bytearray()

    def _on_body(self, buf: bytearray) -> None:
        self.body += buf

    def take(self) -> bytes:
        data = bytes(self.body)
        self.body.clear()
        return data


def _failure(exc: BaseException) -> TransportError:
    if isinstance(exc, TimeoutError | socket.timeout):
        return TransportTimeout(f"{type(exc).__name__}: {exc}")
    return TransportError(f"{type(exc).__name__}: {exc}")


class HttpResponse:
    """One answer on a pooled socket (see :class:`Response`)."""

    def __init__(self, pool: ConnectionPool, sock: socket.socket, parser: _Parser,
                 on_close: Callable[[], None] | None = None) -> None:
        self._pool: ConnectionPool | None = pool
        self._sock = sock
        self._parser = parser
        self._on_close = on_close
        self.status = parser.get_code()

    def _read(self) -> bool:
        """One network read into the parser; False at the end of the body."""
        parser = self._parser
        if parser.message_complete:
            return False
        try:
            data = self._sock.recv(BLOCK_BYTES)
            parser.feed(data)  # b"" tells the parser the connection closed (ends a read-until-close body)
        except (OSError, HTTPParseError) as exc:
            raise _failure(exc) from None
        if not data and not parser.message_complete:
            raise TransportError("connection closed before the end of the answer")
        return bool(data)

    def blocks(self) -> Iterator[bytes]:
        parser = self._parser
        if parser.body:
            yield parser.take()
        while self._read():
            if parser.body:
                yield parser.take()

    def read_body(self, limit: int = BLOCK_BYTES) -> bytes:
        out = bytearray()
        for block in self.blocks():
            out += block
            if len(out) >= limit:
                break
        return bytes(out[:limit])

    def close(self, reuse: bool) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if self._on_close is not None:
            self._on_close()
        parser, sock = self._parser, self._sock
        if reuse and not parser.message_complete:  # [DONE] seen: read the body's end (usually already here)
            with contextlib.suppress(TransportError):
                sock.settimeout(TERMINATOR_WAIT_S)
                while self._read():
                    pass
        if reuse and parser.message_complete and not parser.body and parser.should_keep_alive():
            pool.return_socket(sock)
        else:
            pool.release_socket(sock)


class HttpSession:
    """Keep-alive connections to any number of servers, at most ``max_connections`` in use per server (a further
    request waits); ``headers`` go with every request; ``connect_timeout_s`` bounds TCP (and TLS) set-up."""

    def __init__(self, *, max_connections: int = 1, headers: Mapping[str, str] | None = None,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        self._extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._pools: dict[tuple[str, str, int], ConnectionPool] = {}
        self._in_use: set[socket.socket] = set()  # sockets of requests in flight (abort() shuts them down)

    def _pool(self, scheme: str, host: str, port: int) -> ConnectionPool:
        key = (scheme, host, port)
        pool = self._pools.get(key)
        if pool is None:
            kind = SSLConnectionPool if scheme == "https" else ConnectionPool
            pool = kind(host, port, host, port, size=self.max_connections, connection_timeout=self.connect_timeout_s,
                        network_timeout=self.connect_timeout_s)
            self._pools[key] = pool
        return pool

    def post(self, url: str, body: bytes, *, timeout_s: float,
             on_send: Callable[[], None] | None = None) -> HttpResponse:
        parts = urlsplit(url)
        scheme = parts.scheme or "http"
        if scheme not in ("http", "https") or not parts.hostname:
            raise TransportError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if scheme == "https" else 80)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream, application/json\r\nContent-Length: {len(body)}\r\n{self._extra}\r\n"
        ).encode("latin-1")
        pool = self._pool(scheme, parts.hostname, port)
        for attempt in range(2):
            try:
                sock = pool.get_socket()
            except (OSError, RuntimeError) as exc:  # refused, unreachable, connect timeout, unresolvable name
                raise _failure(exc) from None
            self._in_use.add(sock)
            try:
                sock.settimeout(timeout_s)
                if on_send is not None:
                    on_send()
                sock.sendall(head + body)
                parser = _Parser()
                while not parser.headers_complete or parser.get_code() < 200:
                    data = sock.recv(BLOCK_BYTES)
                    if not data:
                        raise ConnectionResetError(errno.ECONNRESET, "connection closed before the answer")
                    parser.feed(data)
            except BaseException as exc:  # also a killed greenlet: the socket must not stay checked out
                self._in_use.discard(sock)
                pool.release_socket(sock)  # closed: the server sees the disconnect and aborts the request (vLLM)
                if not isinstance(exc, OSError | HTTPParseError):
                    raise
                if attempt == 0 and isinstance(exc, ConnectionResetError | BrokenPipeError):
                    continue  # a kept-alive connection the server had closed: once more, fresh
                raise _failure(exc) from None

            return HttpResponse(pool, sock, parser, on_close=partial(self._in_use.discard, sock))
        raise TransportError("unreachable")  # pragma: no cover - the loop returns or raises

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()

    def abort(self) -> None:
        """Shut down every in-flight request's connection, from any thread (the warmup's): vLLM aborts the request
        and the reader returns a ``connection`` row. Greenlets need not: killing one closes its connection."""

        for sock in list(self._in_use):
            try:  # shutdown on a duplicate descriptor ends the one connection both name; the owner's stays valid
                with socket.socket(fileno=os.dup(sock.fileno())) as dup:
                    dup.shutdown(socket.SHUT_RDWR)
            except OSError:
                continue  # closed meanwhile: nothing left to abort
