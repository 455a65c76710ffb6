"""A mock OpenAI-compatible streaming server with known timings, cheap enough never to be the bottleneck.

``python -m loadgen.selftest.mock_server --port 18900 --tokens 20 --ttft-ms 400 --itl-ms 50`` answers
``/v1/chat/completions`` with a role-only chunk, ``min(tokens, max_tokens or max_completion_tokens)`` content chunks
(the first after ``ttft_ms``, each next ``itl_ms`` later), a usage chunk and ``[DONE]``; ``/v1/models``, ``/health``
and ``/version`` stand in for vLLM's. Answers are pre-built bytes (:mod:`loadgen.selftest.mock_answers`); without
delays an answer goes out in one write (or ``--events-per-write`` N); ``--processes N`` share the port
(``SO_REUSEPORT``). A plain asyncio protocol serves HTTP/1.1 keep-alive with ``Content-Length`` bodies.

The other options imitate other servers' quirks and vLLM's own shapes (see each option's help). ``--metrics``
serves vLLM's ``/metrics`` of the mock's own clock (:mod:`loadgen.selftest.mock_answers`): paced answers then follow
a schedule, and ``--send-delay-ms D`` sends every event D ms after its stamp.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import socket
import sys
import time
from typing import Any

from loadgen.selftest import mock_answers
from loadgen.selftest.mock_answers import MODEL_ID, Answer, MockConfig, MockMetrics, build_answer

MAX_HEAD_BYTES = 64 * 1024


def _response(status: str, body: bytes, content_type: str = "application/json", close: bool = False) -> bytes:
    connection = b"connection: close\r\n" if close else b""
    head = b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s\r\n"
    return head % (status.encode(), content_type.encode(), len(body), connection) + body


class MockServer:
    """Routes and answers; one per process (answers are cached per length)."""

    def __init__(self, cfg: MockConfig) -> None:
        self.cfg = cfg
        self.created = int(time.time())
        self._answers: dict[int, Answer] = {}
        self.metrics = MockMetrics() if cfg.metrics else None
        self.chats = 0
        """Chat answers begun so far (the first ``cfg.fast_answers`` are sent at once)."""
        context = {"max_model_len": cfg.max_model_len} if cfg.list_max_model_len else {}
        models = [{"id": m, "object": "model", "root": m, **context} for m in cfg.models]
        self.routes: dict[tuple[bytes, bytes], bytes] = {
            (b"GET", b"/health"): json.dumps({"status": "ok"}).encode(),
            (b"GET", b"/version"): json.dumps({"version": "mock"}).encode(),
            (b"GET", b"/v1/models"): json.dumps({"object": "list", "data": models}).encode(),
        }

    def refuses(self, target: bytes, authorization: bytes | None) -> bool:
        """vLLM's rule: with a key, every ``/v1`` path needs ``Authorization: Bearer <key>``."""
        key = self.cfg.api_key
        return bool(key) and target.startswith(b"/v1") and authorization != f"Bearer {key}".encode()

    def answer(self, n: int) -> Answer:
        found = self._answers.get(n)
        if found is None:
            found = self._answers[n] = build_answer(self.cfg, n, self.created)
        return found

    def refusal(self, request: dict[str, Any]) -> tuple[str, bytes] | None:
        """vLLM 0.32's error answer (status line, body) to a chat request it refuses: 404 for a model it does not
        serve (``The model `x` does not exist.``), 400 for ``max_tokens`` beyond the context; None when it answers."""
        model = request.get("model")
        try:
            asked = int(request.get("max_tokens") or request.get("max_completion_tokens") or 0)
        except (ValueError, TypeError):
            return None
        if isinstance(model, str) and model not in self.cfg.models:
            error = {"object": "error", "message": f"The model `{model}` does not exist.", "type": "NotFoundError",
                     "param": "model", "code": 404}  # fmt: skip
            return "404 Not Found", json.dumps(error).encode()
        if asked + self.cfg.prompt_tokens <= self.cfg.max_model_len:
            return None
        message = f"max_tokens={asked} cannot be greater than max_model_len={self.cfg.max_model_len}"
        error = {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}
        return "400 Bad Request", json.dumps(error).encode()

    def log_request(self, request: dict[str, Any]) -> None:
        """Append the request's arrival time (Unix s) and messages to ``cfg.request_log`` (tests read what was
        sent and when)."""
        assert self.cfg.request_log is not None
        with open(self.cfg.request_log, "a", encoding="utf-8") as log:
            log.write(json.dumps({"at": time.time(), "messages": request.get("messages")}, ensure_ascii=False) + "\n")

    def tokens_asked(self, request: dict[str, Any]) -> int:
        """Answer length: min(tokens, max_tokens or max_completion_tokens)."""
        asked = request.get("max_tokens") or request.get("max_completion_tokens") or self.cfg.tokens
        try:
            return max(1, min(self.cfg.tokens, int(asked)))
        except (ValueError, TypeError):
            return self.cfg.tokens


def _json_object(body: bytes) -> dict[str, Any]:
    """The request body's JSON object ({} for anything else)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


class _Connection(asyncio.Protocol):
    """One keep-alive connection: requests are read from the buffer one at a time (no pipelining overlap)."""

    def __init__(self, server: MockServer) -> None:
        self.server = server
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.task is not None:
            self.task.cancel()
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._next()

    def _next(self) -> None:
        while self.task is None and self.transport is not None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD_BYTES:
                    self._send(_response("431 Request Header Fields Too Large", b"{}", close=True))
                return
            lines = bytes(self.buf[:end]).split(b"\r\n")
            method, _, rest = lines[0].partition(b" ")
            target = rest.partition(b" ")[0].partition(b"?")[0]
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
            if b"chunked" in headers.get(b"transfer-encoding", b""):
                self._send(_response("411 Length Required", b'{"error":"send Content-Length"}', close=True))
                return
            length = int(headers.get(b"content-length", b"0") or 0)
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            close = headers.get(b"connection", b"").lower() == b"close"
            if self.server.refuses(target, headers.get(b"authorization")):
                self._send(_response("401 Unauthorized", b'{"error":"Unauthorized"}', close=close), close)
                continue
            self._handle(method, target, body, close)

    def _send(self, data: bytes, close: bool = False) -> None:
        if self.transport is not None:
            self.transport.write(data)
            if close:
                self.transport.close()

    def _handle(self, method: bytes, target: bytes, body: bytes, close: bool) -> None:
        server = self.server
        fixed = server.routes.get((method, target))
        if server.metrics is not None and (method, target) == (b"GET", b"/metrics"):
            self._send(_response("200 OK", server.metrics.exposition(), "text/plain; version=0.0.4", close), close)
        elif fixed is not None:
            self._send(_response("200 OK", fixed, close=close), close)
        elif (method, target) == (b"POST", b"/v1/chat/completions"):
            request = _json_object(body)
            refused = server.refusal(request)
            if refused is not None:
                self._send(_response(refused[0], refused[1], close=close), close)
                return
            if server.cfg.request_log:
                server.log_request(request)
            tokens = server.tokens_asked(request)
            answer = server.answer(tokens)
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
            head += b"connection: close\r\n\r\n" if close else b"\r\n"
            cfg = server.cfg
            server.chats += 1
            firehose = server.metrics is None and cfg.ttft_ms <= 0 and cfg.itl_ms <= 0 and cfg.events_per_write <= 0
            if server.chats <= cfg.fast_answers or firehose:
                self._send(head + answer.whole, close)  # one write
            else:
                self.task = asyncio.get_running_loop().create_task(self._stream(head, answer, close, tokens))
        elif method == b"POST" and target in mock_answers.TOKENIZE_PATHS and server.cfg.tokenize_answer:
            broken, content_type = mock_answers.BROKEN_TOKENIZE[server.cfg.tokenize_answer]
            self._send(_response("200 OK", broken, content_type, close=close), close)
        elif method == b"POST" and target in mock_answers.TOKENIZE_PATHS and server.cfg.tokenize:
            self._send(_response("200 OK", mock_answers.tokenize_answer(target, body), close=close), close)
        else:
            self._send(_response("404 Not Found", b'{"detail":"Not Found"}', close=close), close)

    async def _stream(self, head: bytes, answer: Answer, close: bool, tokens: int) -> None:
        """Write the answer on the server's clock: content event k is stamped at ``arrival + ttft + k * itl`` (or
        when the loop gets there, so no gap is shorter than ``itl_ms``) and leaves ``send_delay_ms`` after its stamp;
        without delays ``events_per_write`` events per write, a turn of the event loop between writes. With
        ``--metrics`` the stamps go to ``/metrics`` when the answer ends."""
        cfg, metrics = self.server.cfg, self.server.metrics
        loop = asyncio.get_running_loop()
        delay_s = cfg.send_delay_ms / 1000.0
        step = 1 if cfg.itl_ms > 0 or metrics is not None else max(1, cfg.events_per_write)
        arrival = loop.time()
        stamps: list[float] = []
        if metrics is not None:
            metrics.running += 1  # until the answer ends or the client goes away (connection_lost cancels this task)
        try:
            self._send(head + answer.head)
            due = arrival + cfg.ttft_ms / 1000.0
            for i in range(0, len(answer.content), step):
                await asyncio.sleep(max(0.0, due + delay_s - loop.time()))
                stamp = loop.time() - delay_s  # never earlier than due: the loop may be late, the stamp with it
                stamps.append(stamp)
                self._send(b"".join(answer.content[i : i + step]))
                due = stamp + cfg.itl_ms / 1000.0
            self._send(answer.tail, close)
            if metrics is not None:
                metrics.record(arrival, stamps, tokens, cfg.prompt_tokens)
        finally:
            if metrics is not None:
                metrics.running -= 1
            self.task = None
        self._next()


async def serve(cfg: MockConfig, host: str, port: int, reuse_port: bool) -> None:
    """Serve until cancelled."""
    server = MockServer(cfg)
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(lambda: _Connection(server), host, port, reuse_port=reuse_port, backlog=4096)
    async with listener:
        await listener.serve_forever()


def run(cfg: MockConfig, host: str, port: int, processes: int) -> int:
    """Serve from ``processes`` processes on one port (the first is the parent of the others); stops on
    SIGTERM/SIGINT, taking the others with it."""
    children: list[int] = []
    for _ in range(processes - 1):
        pid = os.fork()
        if pid == 0:
            children.clear()
            break
        children.append(pid)

    def stop(*_: object) -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGTERM)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with contextlib.suppress(SystemExit):
        asyncio.run(serve(cfg, host, port, reuse_port=processes > 1))
    return 0


def main(argv: list[str] | None = None) -> int:
    """CLI entry."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=18900)
    add("--tokens", type=int, default=20)
    add("--ttft-ms", type=float, default=400.0)
    add("--itl-ms", type=float, default=50.0)
    add("--tokens-per-chunk", type=int, default=1, help="tokens per event (vLLM-like chunking, --stream-interval)")
    add("--events-per-write", type=int, default=0,
        help="without delays: events per write, a turn of the event loop between (0 = the whole answer in one write)")
    add("--processes", type=int, default=1, help="server processes on the port (SO_REUSEPORT)")
    add("--no-usage", dest="usage", action="store_false", help="send no usage block")
    add("--no-done", dest="done", action="store_false",
        help="end after the finish chunk, without [DONE] (as transformers serve)")
    add("--no-tokenize", dest="tokenize", action="store_false", help="no /tokenize (404, as most non-vLLM servers)")
    add("--tokenize-answer", choices=sorted(mock_answers.BROKEN_TOKENIZE), default=None,
        help="/tokenize and /detokenize answer 200 with an HTML page, a JSON list or nothing (as a gateway may)")
    add("--bad-chunk", default=None, help="a raw data line sent after the first content chunk of every answer")
    add("--models", type=lambda v: tuple(m for m in v.split(",") if m), default=MODEL_ID,
        help="comma-separated model ids of /v1/models")
    add("--max-model-len", type=int, default=4096, help="context: longer requests get HTTP 400")
    add("--unlisted-context", dest="list_max_model_len", action="store_false",
        help="/v1/models does not list max_model_len")
    add("--require-api-key", action="store_true",
        help="401 on /v1 without 'Authorization: Bearer <VLLM_API_KEY>' (as vLLM --api-key; the key from settings)")
    add("--role-with-first", action="store_true", help="the role chunk leaves with the first token (as vLLM)")
    add("--held-back", type=lambda v: frozenset(int(x) for x in v.split(",") if x.strip()), default="",
        help="0-based tokens sent with empty content, e.g. 0,5 (vLLM's detokenizer holding text back)")
    add("--metrics", action="store_true", help="serve vLLM's /metrics of the mock's own clock")
    add("--send-delay-ms", type=float, default=0.0, help="--metrics: events leave this late")
    add("--fast-answers", type=int, default=0, help="each process's first N chat answers: unpaced")
    add("--request-log", default=None, help="append each chat request's arrival and messages here (JSONL)")
    add("--reasoning", dest="reasoning_tokens", metavar="REASONING", type=int, default=0,
        help="a reasoning model: each answer's first N tokens are reasoning deltas (usage counts them)")
    add("--reasoning-field", choices=("reasoning", "reasoning_content"), default="reasoning",
        help="the delta field of reasoning text (vLLM 0.32: reasoning)")
    args = parser.parse_args(argv)
    if args.tokens < 1 or args.tokens_per_chunk < 1 or args.processes < 1 or args.events_per_write < 0:
        parser.error("--tokens, --tokens-per-chunk and --processes must be >= 1, --events-per-write >= 0")
    if args.fast_answers and args.metrics:
        parser.error("--fast-answers with --metrics: unpaced answers would be missing from /metrics; use one of them")
    api_key = None
    if args.require_api_key:
        from core.settings import get_settings

        api_key = get_settings().vllm_client_key
        if not api_key:
            parser.error("--require-api-key needs VLLM_API_KEY")
    fields = {f.name for f in dataclasses.fields(MockConfig)}
    options = {k: v for k, v in vars(args).items() if k in fields}
    options.update(fast_answers=max(0, args.fast_answers), reasoning_tokens=max(0, args.reasoning_tokens))
    cfg = MockConfig(**options, api_key=api_key)
    print(f"[MOCK] http://{args.host}:{args.port} ({args.processes} process(es))", file=sys.stderr, flush=True)
    return run(cfg, args.host, args.port, args.processes)


if __name__ == "__main__":
    raise SystemExit(main())
