"""A mock OpenAI-compatible streaming server with known timings, to check the load generator's clocks.

``python -m loadtest.mock_server --port 18900 --tokens 20 --ttft-ms 400 --itl-ms 50`` answers
``/v1/chat/completions`` with a role-only chunk, then ``tokens`` content chunks (the first after ``ttft_ms``,
the rest ``itl_ms`` apart; ``tokens_per_chunk`` > 1 packs several tokens into one event), a usage chunk and
``[DONE]``. ``/v1/models``, ``/health`` and ``/version`` exist so it stands in for vLLM.

Quirks of other servers, for the robustness tests: ``--no-usage`` (no usage block), ``--no-done`` (the stream ends
after the chunk with ``finish_reason`` and usage, as ``transformers serve`` does), ``--bad-chunk JSON`` (that data
line is sent after the first content chunk of every answer), ``--models a,b`` (several served models).
``--require-api-key`` answers 401 on ``/v1/*`` without ``Authorization: Bearer <VLLM_API_KEY>``, as vLLM started
with ``--api-key`` does (the key is read from the settings, never from the command line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

MODEL_ID = "mock-model"
TOKEN_TEXT = "字"  # a 3-byte UTF-8 character, so split-character handling is exercised


@dataclass
class MockConfig:
    """Shape of every mock answer."""

    tokens: int = 20
    ttft_ms: float = 400.0
    itl_ms: float = 50.0
    tokens_per_chunk: int = 1
    prompt_tokens: int = 7
    usage: bool = True
    done: bool = True
    bad_chunk: str | None = None
    models: tuple[str, ...] = (MODEL_ID,)
    api_key: str | None = None


def _chunk(body: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n".encode()


async def _stream(cfg: MockConfig, max_tokens: int) -> AsyncIterator[bytes]:
    n = min(cfg.tokens, max_tokens)
    created = int(time.time())
    base = {"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": created, "model": MODEL_ID}
    yield _chunk({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    sent = 0
    await asyncio.sleep(cfg.ttft_ms / 1000.0)
    while sent < n:
        if sent:
            await asyncio.sleep(cfg.itl_ms / 1000.0)
        k = min(cfg.tokens_per_chunk, n - sent)
        sent += k
        finish = "length" if sent >= n else None
        delta = {"content": TOKEN_TEXT * k}
        yield _chunk({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        if cfg.bad_chunk is not None and sent == k:
            yield f"data: {cfg.bad_chunk}\n\n".encode()
    if cfg.usage:
        usage = {"prompt_tokens": cfg.prompt_tokens, "completion_tokens": n, "total_tokens": cfg.prompt_tokens + n}
        yield _chunk({**base, "choices": [], "usage": usage})
    if cfg.done:
        yield b"data: [DONE]\n\n"


def create_app(cfg: MockConfig) -> FastAPI:
    """The mock server's app."""
    app = FastAPI(title="mock OpenAI streaming server")

    @app.middleware("http")
    async def require_key(request: Request, call_next: Any) -> Any:
        """vLLM's rule: with a key, every ``/v1`` path needs ``Authorization: Bearer <key>``."""
        authorized = request.headers.get("authorization") == f"Bearer {cfg.api_key}"
        if cfg.api_key and request.url.path.startswith("/v1") and not authorized:
            return JSONResponse({"error": "Unauthorized"}, status_code=401)
        return await call_next(request)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/version")
    def version() -> dict[str, str]:
        return {"version": "mock"}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": m, "object": "model", "root": m, "max_model_len": 4096} for m in cfg.models],
        }

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> StreamingResponse:
        body = await request.json()
        max_tokens = int(body.get("max_tokens") or cfg.tokens)
        return StreamingResponse(_stream(cfg, max_tokens), media_type="text/event-stream")

    return app


def main(argv: list[str] | None = None) -> int:
    """CLI entry."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18900)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--ttft-ms", type=float, default=400.0)
    parser.add_argument("--itl-ms", type=float, default=50.0)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument("--no-usage", action="store_true", help="send no usage block")
    parser.add_argument("--no-done", action="store_true", help="end after the finish chunk, without [DONE]")
    parser.add_argument("--bad-chunk", default=None, help="a raw data line sent after the first content chunk")
    parser.add_argument("--models", default=MODEL_ID, help="comma-separated model ids of /v1/models")
    parser.add_argument("--require-api-key", action="store_true", help="require VLLM_API_KEY on /v1 (as vLLM does)")
    args = parser.parse_args(argv)
    api_key = None
    if args.require_api_key:
        from core.settings import get_settings

        api_key = get_settings().vllm_client_key
        if not api_key:
            parser.error("--require-api-key needs VLLM_API_KEY")
    cfg = MockConfig(
        args.tokens,
        args.ttft_ms,
        args.itl_ms,
        args.tokens_per_chunk,
        usage=not args.no_usage,
        done=not args.no_done,
        bad_chunk=args.bad_chunk,
        models=tuple(m for m in args.models.split(",") if m),
        api_key=api_key,
    )
    uvicorn.run(create_app(cfg), host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
