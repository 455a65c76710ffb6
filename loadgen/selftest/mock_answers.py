"""The mock server's answers as bytes (pure; served by :mod:`loadgen.selftest.mock_server`): its settings
(:class:`MockConfig`), one streamed answer's framed events (:func:`build_answer`) in vLLM's chunk shapes and the quirks
of other servers, and ``/tokenize``/``/detokenize`` (:func:`tokenize_answer`): one token per character, its id the
code point, a chat template of :data:`TEMPLATE_TOKENS` tokens, so token-exact prompts can be built against the mock.

The mock's own clock (``--metrics``, :class:`MockMetrics`): what vLLM's output processor would stamp for every streamed
answer (arrival, each token, finish), served under vLLM's ``/metrics`` names, with ``vllm:num_requests_running``
(answers being streamed; a disconnect leaves it at once, as vLLM aborts) and ``vllm:num_requests_waiting`` (0). With
``--send-delay-ms D`` a client's overhead over these figures must grow by D (the cross-check's test of itself)."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

MODEL_ID = "mock-model"
TOKEN_TEXT = "字"  # a 3-byte UTF-8 character, so split-character handling is exercised
THOUGHT_TEXT = "想"  # a reasoning token's text (--reasoning N)
TEMPLATE_TOKENS = 4  # <user>, </user>, <assistant> and a newline, as the mock's "chat template"
TOKENIZE_PATHS = frozenset({b"/tokenize", b"/detokenize"})
BROKEN_TOKENIZE = {  # --tokenize-answer: what a gateway or another engine answers on these paths with HTTP 200
    "html": (b"<!DOCTYPE html><html><head><title>Gateway</title></head><body>Not here</body></html>", "text/html"),
    "list": (b"[]", "application/json"),
    "empty": (b"", "application/json"),
}


@dataclass(frozen=True)
class MockConfig:
    """Shape of every mock answer."""

    tokens: int = 20
    ttft_ms: float = 400.0
    itl_ms: float = 50.0
    tokens_per_chunk: int = 1
    events_per_write: int = 0
    prompt_tokens: int = 7
    usage: bool = True
    done: bool = True
    bad_chunk: str | None = None
    models: tuple[str, ...] = (MODEL_ID,)
    api_key: str | None = None
    max_model_len: int = 4096  # as vLLM: a request asking for more output than fits is refused with HTTP 400
    list_max_model_len: bool = True  # False: /v1/models does not say the context (as many non-vLLM servers)
    metrics: bool = False  # serve vLLM's /metrics histograms of the mock's own clock
    send_delay_ms: float = 0.0  # every event leaves this long after the time /metrics records for it
    role_with_first: bool = False  # vLLM: the role chunk leaves with the first token
    held_back: frozenset[int] = frozenset()  # tokens sent as "content": "" (text held back by vLLM's detokenizer)
    tokenize: bool = True  # answer vLLM's /tokenize and /detokenize (tokenize_answer); False: 404, as most servers
    tokenize_answer: str | None = None  # "html", "list" or "empty": /tokenize and /detokenize answer 200 with that
    fast_answers: int = 0  # per server process: its first this many chat answers leave at once, later ones on schedule
    reasoning_tokens: int = 0  # a reasoning model: each answer's first this many tokens are reasoning deltas
    request_log: str | None = None  # append each chat request's arrival (Unix s) and messages here (JSONL)
    reasoning_field: str = "reasoning"  # vLLM 0.32 streams "reasoning"; older vLLM and DeepSeek "reasoning_content"


def _frame(data: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(body: dict[str, Any]) -> bytes:
    """One server-sent event of a JSON body."""
    return b"data: " + json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


@dataclass(frozen=True)
class Answer:
    """A streamed answer as framed events: ``head`` (the role chunk), ``content`` (one per event), ``tail`` (the
    bad chunk after the first content event is in ``content``; usage, [DONE], the end of the body)."""

    head: bytes
    content: tuple[bytes, ...]
    tail: bytes

    @property
    def whole(self) -> bytes:
        """The whole answer in one byte string."""
        return self.head + b"".join(self.content) + self.tail


def build_answer(cfg: MockConfig, n: int, created: int) -> Answer:
    """The framed events of an ``n``-token answer (pure)."""
    base = {"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": created, "model": cfg.models[0]}
    head = _frame(_event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))
    content: list[bytes] = []
    sent = 0
    while sent < n:
        k = min(cfg.tokens_per_chunk, n - sent)
        text = "" if len(content) in cfg.held_back else TOKEN_TEXT * k
        field = cfg.reasoning_field if sent < cfg.reasoning_tokens else "content"
        if field != "content":
            k = min(k, cfg.reasoning_tokens - sent)  # a chunk holds one kind of token
            text = "" if len(content) in cfg.held_back else THOUGHT_TEXT * k
        sent += k
        choice = {"index": 0, "delta": {field: text}, "logprobs": None,
                  "finish_reason": "length" if sent >= n else None}  # fmt: skip
        event = _frame(_event({**base, "choices": [choice]}))
        if cfg.bad_chunk is not None and sent == k:
            event += _frame(f"data: {cfg.bad_chunk}\n\n".encode())
        content.append(event)
    if cfg.role_with_first and content:
        head, content[0] = b"", head + content[0]
    tail = b""
    if cfg.usage:
        usage: dict[str, Any] = {"prompt_tokens": cfg.prompt_tokens, "completion_tokens": n,
                                 "total_tokens": cfg.prompt_tokens + n}  # fmt: skip
        if cfg.reasoning_tokens:  # as vLLM started with a reasoning parser
            usage["completion_tokens_details"] = {"reasoning_tokens": min(n, cfg.reasoning_tokens)}
        tail += _frame(_event({**base, "choices": [], "usage": usage}))
    if cfg.done:
        tail += _frame(b"data: [DONE]\n\n")
    return Answer(head, tuple(content), tail + b"0\r\n\r\n")


def tokenize_answer(path: bytes, body: bytes) -> bytes:
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


MODEL_LABEL = 'engine="0",model_name="mock-model"'
BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


@dataclass
class _Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS_S))
    total_s: float = 0.0
    count: int = 0

    def observe(self, value_s: float) -> None:
        self.total_s += value_s
        self.count += 1
        for i, bound in enumerate(BUCKETS_S):
            if value_s <= bound:
                self.counts[i] += 1

    def lines(self, name: str) -> list[str]:
        out = [f"# TYPE {name} histogram"]
        out += [f'{name}_bucket{{{MODEL_LABEL},le="{b}"}} {c}.0' for b, c in zip(BUCKETS_S, self.counts, strict=True)]
        out += [f'{name}_bucket{{{MODEL_LABEL},le="+Inf"}} {self.count}.0',
                f"{name}_count{{{MODEL_LABEL}}} {self.count}.0", f"{name}_sum{{{MODEL_LABEL}}} {self.total_s!r}"]
        return out


@dataclass
class MockMetrics:
    """What the mock's engine did so far (one per server process; a test uses one process)."""

    ttft: _Histogram = field(default_factory=_Histogram)
    itl: _Histogram = field(default_factory=_Histogram)
    e2e: _Histogram = field(default_factory=_Histogram)
    succeeded: int = 0
    generated: int = 0
    prompt: int = 0
    running: int = 0
    """Answers being streamed now (begun, neither finished nor cut by their client's disconnect)."""

    def record(self, arrival_s: float, token_times_s: list[float], tokens: int, prompt_tokens: int) -> None:
        """One finished answer: its arrival and the engine time of each content event (seconds, one clock)."""
        if not token_times_s:
            return
        self.ttft.observe(token_times_s[0] - arrival_s)
        for before, after in itertools.pairwise(token_times_s):
            self.itl.observe(after - before)
        self.e2e.observe(token_times_s[-1] - arrival_s)
        self.succeeded += 1
        self.generated += tokens
        self.prompt += prompt_tokens

    def exposition(self) -> bytes:
        """The Prometheus text of everything recorded (vLLM's names and labels)."""
        lines = []
        for name, kind, label, value in (
            ("vllm:num_requests_running", "gauge", "", self.running), ("vllm:num_requests_waiting", "gauge", "", 0),
            ("vllm:request_success_total", "counter", ',finished_reason="length"', self.succeeded),
            ("vllm:generation_tokens_total", "counter", "", self.generated),
            ("vllm:prompt_tokens_total", "counter", "", self.prompt),
        ):
            lines += [f"# TYPE {name} {kind}", f"{name}{{{MODEL_LABEL}{label}}} {value}.0"]
        for histogram, name in ((self.ttft, "time_to_first_token"), (self.itl, "inter_token_latency"),
                                (self.e2e, "e2e_request_latency")):
            lines += histogram.lines(f"vllm:{name}_seconds")
        return ("\n".join(lines) + "\n").encode()
