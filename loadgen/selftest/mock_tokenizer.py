"""The mock server's ``/tokenize`` and ``/detokenize`` (vLLM's shapes): one token per character, its id the code
point, and a chat template of :data:`TEMPLATE_TOKENS` tokens, so token-exact prompts (DATASET=random, TRACE) can be
built against the mock."""

from __future__ import annotations

import json
from typing import Any

TEMPLATE_TOKENS = 4  # <user>, </user>, <assistant> and a newline, as the mock's "chat template"
PATHS = frozenset({b"/tokenize", b"/detokenize"})
BROKEN = {  # --tokenize-answer: what a gateway or another engine answers on these paths with HTTP 200
    "html": (b"<!DOCTYPE html><html><head><title>Gateway</title></head><body>Not here</body></html>", "text/html"),
    "list": (b"[]", "application/json"),
    "empty": (b"", "application/json"),
}


def answer(path: bytes, body: bytes) -> bytes:
    """The JSON answer to ``POST path`` with ``body``: ``{"tokens", "count"}`` for ``/tokenize`` (a ``prompt`` or
    ``messages``, the template counted for messages), ``{"prompt"}`` for ``/detokenize``; ``{"error"}`` for a body
    of another shape."""
    try:
        request: Any = json.loads(body or b"{}")
        if path == b"/detokenize":
            return json.dumps({"prompt": "".join(chr(int(t)) for t in request["tokens"])}).encode()
        if "messages" in request:
            text = "".join(str(m["content"]) for m in request["messages"])
            tokens = [ord(c) for c in text] + [0] * (TEMPLATE_TOKENS * len(request["messages"]))
        else:
            tokens = [ord(c) for c in str(request["prompt"])]
    except (ValueError, KeyError, TypeError) as exc:
        return json.dumps({"error": f"bad body: {exc}"}).encode()
    return json.dumps({"tokens": tokens, "count": len(tokens)}).encode()
