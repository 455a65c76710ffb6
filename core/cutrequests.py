"""Requests the run's end cut (``incomplete`` rows: DURATION + DRAIN_S, Ctrl-C, the watchdog, a dead server) and
what they had received when cut: the part of a run no other figure holds (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel, Field

from core.latency import LatencyStats, effective_e2e_ms, effective_ttft_ms, latency_stats
from core.records import RequestRecord


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
