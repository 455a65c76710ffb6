"""One row per request: what the load generator measured, or why the request failed (failures are values); the
latency distributions over rows: mean, percentiles and max of a list of milliseconds (``numpy.percentile``, linear
interpolation); and what the requests the run's end cut had received, the part of a run no other figure holds."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from core.streamtiming import EndReason

ErrorKind = Literal[
    "http_status",  # the server answered with a non-2xx status
    "timeout",  # no answer (or no next chunk) within the request timeout
    "connection",  # refused, reset or dropped before the stream ended
    "no_done",  # the stream ended without `data: [DONE]` and without a final finish_reason (truncated)
    "empty_output",  # the stream finished but carried no content
    "invalid_stream",  # a `data:` line that is not JSON or not a chunk of OpenAI's shape, or an error in the stream
    "client_error",  # the load generator itself failed on this request (a bug: the row keeps the exception)
    "incomplete",  # still in flight when the run ended (DURATION + DRAIN_S, or Ctrl-C): cancelled, not a failure
]
TokenSource = Literal["usage", "tokenize", "chunks"]
SplitSource = Literal["usage", "chunks"]
OMITTED_WHEN_UNSET = frozenset({"reasoning_ttft_ms", "answer_ttft_ms", "reasoning_tokens", "answer_tokens",
                                "reasoning_tokens_source", "cached_tokens", "think_time_s"})  # fmt: skip
"""Fields a row carries only when set (reasoning streams, a server that reports cached tokens, conversations), so
the rows of a run without them read byte for byte as before they existed."""

Phase = Literal["warmup", "measured"]


class RequestRecord(BaseModel):
    """A streamed chat-completion request as the client saw it: times in ms from ``started_at`` (Unix s), token counts
    from the server's ``usage``, ``content_chunks`` the client's count of non-empty content deltas."""

    request_id: str
    phase: Phase = "measured"
    started_at: float = Field(description="Unix time the request was sent, s.")
    scheduled_at: float | None = Field(
        default=None,
        description="Open loop: Unix time the request was *meant* to be sent, s. Latencies are then measured from "
        "here, so a client backlog shows up in the numbers (no coordinated omission).",
    )
    task: str | None = None
    input_bucket: str | None = None
    session_id: str | None = Field(default=None, description="SESSION_TURNS > 1: the conversation of this turn.")
    turn: int | None = Field(default=None, description="SESSION_TURNS > 1: 1 for a conversation's first turn, ...")
    host: str | None = Field(default=None, description="The host whose load process sent it (LOAD_HOST_NAME or its "
                             "host name).")
    process: str | None = Field(default=None, description="The load process that sent it: local, worker<slot> or "
                                "remote<slot>, and its pid (e.g. worker1:4242).")
    ok: bool
    ttft_ms: float | None = Field(default=None, description="Time to the first non-empty content token.")
    e2e_ms: float | None = Field(default=None, description="Time to the end of the stream ([DONE]) or failure.")
    itl_ms: list[float] = Field(default_factory=list, description="Gaps between consecutive content chunks.")
    prompt_tokens: int | None = None
    output_tokens: int | None = Field(
        default=None,
        description="Output tokens: usage.completion_tokens, else counted by the server's /tokenize, else the "
        "client's count of content chunks (see output_tokens_source).",
    )
    output_tokens_source: TokenSource | None = Field(
        default=None, description="Where output_tokens (and prompt_tokens) came from: usage, tokenize or chunks."
    )
    content_chunks: int = 0
    output_chars: int = 0
    max_tokens: int | None = None
    finish_reason: str | None = None
    end_reason: EndReason | None = Field(
        default=None,
        description="How the stream ended: done ([DONE]), finish_then_close (clean close after a finish_reason), "
        "truncated; None when no stream was read (a refused or failed request).",
    )
    http_status: int | None = None
    error_kind: ErrorKind | None = None
    error: str | None = None
    reasoning_ttft_ms: float | None = Field(
        default=None,
        description="Reasoning streams: send → the first reasoning token (a reasoning or reasoning_content delta); "
        "absent when the stream carried no reasoning.",
    )
    answer_ttft_ms: float | None = Field(
        default=None,
        description="Reasoning streams: send → the first answer (content) token; None when the answer never began "
        "(max_tokens spent thinking). Without reasoning the answer's first token is ttft_ms.",
    )
    reasoning_tokens: int | None = Field(
        default=None, description="Reasoning streams: reasoning tokens (see reasoning_tokens_source)."
    )
    answer_tokens: int | None = Field(default=None, description="Reasoning streams: answer (content) tokens.")
    reasoning_tokens_source: SplitSource | None = Field(
        default=None,
        description="Where the reasoning/answer split came from: usage (completion_tokens_details.reasoning_tokens) "
        "or chunks (the client's count of reasoning and content token chunks).",
    )
    cached_tokens: int | None = Field(
        default=None,
        description="Prompt tokens the server found in its prefix cache (usage.prompt_tokens_details.cached_tokens; "
        "vLLM with --enable-prompt-tokens-details); absent when the server does not say.",
    )
    think_time_s: float | None = Field(
        default=None, description="Conversations: the user's pause before this turn (after the previous answer), s."
    )

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name in OMITTED_WHEN_UNSET:
            if data.get(name, 0) is None:
                del data[name]
        return data

    @property
    def ended_at(self) -> float:
        """Unix time the request ended, s."""
        return self.started_at + (self.e2e_ms or 0.0) / 1000.0

    @property
    def queue_delay_ms(self) -> float:
        """How late the request left the client compared with its schedule (0 in closed loop), ms."""
        return max(0.0, (self.started_at - self.scheduled_at) * 1000.0) if self.scheduled_at else 0.0

    @property
    def tpot_ms(self) -> float | None:
        """Time per output token after the first: (E2E - TTFT) / (output tokens - 1); None below 2 tokens."""
        if self.e2e_ms is None or self.ttft_ms is None or not self.output_tokens or self.output_tokens < 2:
            return None
        return (self.e2e_ms - self.ttft_ms) / (self.output_tokens - 1)


class LatencyStats(BaseModel):
    """Distribution of one latency, milliseconds. All None when there are no values."""

    count: int = 0
    mean_ms: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None


def latency_stats(values_ms: Sequence[float]) -> LatencyStats:
    """Mean, p50/p90/p95/p99 (linear interpolation) and max of ``values_ms``."""
    if not values_ms:
        return LatencyStats()
    arr = np.asarray(values_ms, dtype=float)
    p50, p90, p95, p99 = np.percentile(arr, [50, 90, 95, 99])
    return LatencyStats(
        count=int(arr.size),
        mean_ms=float(arr.mean()),
        p50_ms=float(p50),
        p90_ms=float(p90),
        p95_ms=float(p95),
        p99_ms=float(p99),
        max_ms=float(arr.max()),
    )


def shown(value: float | None, digits: int = 0, unit: str = "") -> str:
    """``value`` with ``digits`` decimals and ``unit`` (e.g. ``" ms"``) for a text line; ``n/a`` for None."""
    return "n/a" if value is None else f"{value:.{digits}f}{unit}"


def mean_or_none(values: Sequence[float]) -> float | None:
    """The arithmetic mean of ``values``; None when empty."""
    return sum(values) / len(values) if values else None


def effective_ttft_ms(r: RequestRecord) -> float | None:
    """TTFT counted from the scheduled send time (equals TTFT in closed loop)."""
    return None if r.ttft_ms is None else r.ttft_ms + r.queue_delay_ms


def effective_e2e_ms(r: RequestRecord) -> float | None:
    """E2E latency counted from the scheduled send time (equals E2E in closed loop)."""
    return None if r.e2e_ms is None else r.e2e_ms + r.queue_delay_ms


class CutRequests(BaseModel):
    """Measured requests the run's end cut (``incomplete`` rows: DURATION + DRAIN_S, Ctrl-C, the watchdog, a dead
    server): what they had received when cut. vLLM's TTFT histogram holds them too; they are in no other figure."""

    requests: int
    with_first_token: int = Field(description="Cut requests that had received their first content token.")
    ttft: LatencyStats = Field(description="TTFT of the cut requests that received a first token (from the "
                               "scheduled send time in open loop, as every TTFT).")  # fmt: skip
    in_flight: LatencyStats = Field(description="How long each cut request had been in flight when cut.")
    content_chunks: int = Field(description="Content chunks the cut requests had received, all together.")
    output_chars: int = Field(description="Characters of answer text the cut requests had received, all together.")
    by_cause: dict[str, int] = Field(
        default_factory=dict, description="Cut requests by what cut them, e.g. 'the end of the run', 'Ctrl-C'."
    )


def cut_cause(r: RequestRecord) -> str:
    """What cut an ``incomplete`` row: its error's ``cancelled by <cause> (<exception>)`` without the exception."""
    text = (r.error or "").removeprefix("cancelled by ")
    return text.rsplit(" (", 1)[0] if text.endswith(")") else text or "unknown"


def cut_requests(rows: Sequence[RequestRecord]) -> CutRequests | None:
    """What the ``incomplete`` rows among ``rows`` had received when cut; None when none was cut."""
    cut = [r for r in rows if r.error_kind == "incomplete"]
    if not cut:
        return None
    return CutRequests(
        requests=len(cut),
        with_first_token=sum(r.ttft_ms is not None for r in cut),
        ttft=latency_stats([v for r in cut if (v := effective_ttft_ms(r)) is not None]),
        in_flight=latency_stats([v for r in cut if (v := effective_e2e_ms(r)) is not None]),
        content_chunks=sum(r.content_chunks for r in cut),
        output_chars=sum(r.output_chars for r in cut),
        by_cause=dict(sorted(Counter(cut_cause(r) for r in cut).items())),
    )


NO_ENGINE_ANSWERS = (b"No available workers", b"error sending request")
"""vllm-router's answers when no engine behind it can be reached (``503 No available workers (all circuits open or
unhealthy)``, ``500 Request failed: error sending request for url …``, both seen when the engine behind the stack's
router died): an HTTP error from the router, but the engine is as down as a refused connection."""


MODEL_GONE_ANSWERS = (b"does not exist",)
"""vLLM's answer to a request naming a model it does not serve (``404 The model `X` does not exist.``,
``vllm/entrypoints/openai`` ``_check_model``): mid-run, after ``./start_vllm.sh`` switched the stack to another model,
the engine of the run's model is as gone as a dead one (the preflight checked the model was served at the start)."""
MODEL_GONE_LINE = "vLLM stopped serving the run's model"
"""How a run's ``server_down`` line begins when those answers ended it (vLLM answered, for another model)."""
ENGINE_GONE_ANSWERS = NO_ENGINE_ANSWERS + MODEL_GONE_ANSWERS
"""HTTP error answers that say the engine of the run's model is gone (the back-off and the server-down breaker)."""


def engine_unreachable(error_kind: str | None, error: str | None) -> bool:
    """True when no engine of the run's model could be reached (connection, router or model gone)."""
    if error_kind == "connection":
        return True
    text = (error or "").encode("utf-8", "replace")
    return error_kind == "http_status" and any(answer in text for answer in ENGINE_GONE_ANSWERS)
