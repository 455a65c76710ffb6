"""What the client added to the server's own clock: mean TTFT, ITL and E2E, client minus server, over one server's
window (part of the server cross-check, :mod:`core.serverview`; one entry per server or replica).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from core.records import RequestRecord, mean_or_none
from core.serverview_samples import Samples, latency_view

ADDED_FIGURES = (  # (name, vLLM histogram, the least added ms ever flagged: below it a share means nothing)
    ("ttft", "vllm:time_to_first_token_seconds", 5.0),
    ("itl", "vllm:inter_token_latency_seconds", 0.5),
    ("e2e", "vllm:e2e_request_latency_seconds", 5.0),
)
CLIENT_OVERHEAD_MAX_PCT = 10.0  # default of the CLIENT_OVERHEAD_MAX_PCT setting


class AddedLatency(BaseModel):
    """One latency as the client measured it and as the server's own histogram did, over the same window."""

    name: str = Field(description="ttft, itl or e2e.")
    client_mean_ms: float | None
    server_mean_ms: float | None = Field(description="_sum / _count delta of the server's histogram; None: empty.")
    added_ms: float | None = Field(description="client_mean_ms - server_mean_ms: what the client's side added.")
    added_percent: float | None = Field(description="added_ms as a share of server_mean_ms, %.")


class ClientOverhead(BaseModel):
    """What the client added to one server's own TTFT, ITL and E2E over the measured window."""

    server_url: str | None = Field(default=None, description="The server scraped (one entry per replica).")
    figures: list[AddedLatency] = Field(default_factory=list, description="ttft, itl, e2e (those measured).")
    max_added_pct: float = Field(description="The share above which a figure is flagged (CLIENT_OVERHEAD_MAX_PCT).")
    flagged: list[str] = Field(default_factory=list, description="Names of the figures the client added too much to.")
    missing: str | None = Field(default=None, description="Why the comparison could not be made, when it could not.")


def client_overhead(
    before: Samples,
    after: Samples,
    records: Sequence[RequestRecord],
    *,
    server_url: str | None = None,
    max_added_pct: float = CLIENT_OVERHEAD_MAX_PCT,
) -> ClientOverhead:
    """Client mean minus server mean of TTFT, ITL and E2E over one server's window.

    The client's means are over the rows the server's histograms hold (TTFT and ITL: every measured row that got
    them; E2E: successful rows); the server's are exact ``_sum``/``_count`` deltas. A figure is flagged above
    ``max_added_pct`` % and a floor (5 ms TTFT/E2E, 0.5 ms ITL); ``missing`` says why nothing could be compared."""
    measured = [r for r in records if r.phase == "measured"]
    ok = [r for r in measured if r.ok]
    client = {
        "ttft": [r.ttft_ms for r in measured if r.ttft_ms is not None],
        "itl": [gap for r in measured for gap in r.itl_ms],
        "e2e": [r.e2e_ms for r in ok if r.e2e_ms is not None],
    }
    absent = [metric for _, metric, _ in ADDED_FIGURES if f"{metric}_count" not in after]
    if len(absent) == len(ADDED_FIGURES):
        why = "the server's /metrics has none of " + ", ".join(absent) + " (not vLLM, or a version without them)"
        return ClientOverhead(server_url=server_url, max_added_pct=max_added_pct, missing=why)
    figures, flagged = [], []
    for name, metric, floor_ms in ADDED_FIGURES:
        if metric in absent:
            continue
        values = client[name]
        client_ms = mean_or_none(values)
        server_ms = latency_view(before, after, metric).mean_ms
        added = None if client_ms is None or server_ms is None else client_ms - server_ms
        share = _pct(client_ms, server_ms)
        figures.append(
            AddedLatency(
                name=name, client_mean_ms=client_ms, server_mean_ms=server_ms, added_ms=added, added_percent=share
            )
        )
        if added is not None and share is not None and share > max_added_pct and added > floor_ms:
            flagged.append(name)
    missing = None
    if all(f.added_ms is None for f in figures):
        missing = "no request of the window in the server's latency histograms" if ok else "no successful request"
    return ClientOverhead(
        server_url=server_url, figures=figures, max_added_pct=max_added_pct, flagged=flagged, missing=missing
    )


def overhead_text(overhead: ClientOverhead) -> str:
    """``TTFT +21.3 ms (+1.2%), ... over the server's own``, with the flag or why it is missing."""
    where = f" ({overhead.server_url})" if overhead.server_url else ""
    if overhead.missing:
        return f"client overhead not measured{where}: {overhead.missing}"
    parts = [
        f"{f.name.upper()} {f.added_ms:+.1f} ms ({f.added_percent:+.1f}%)"
        if f.added_ms is not None and f.added_percent is not None
        else f"{f.name.upper()} n/a"
        for f in overhead.figures
    ]
    text = ", ".join(parts) + f" over the server's own{where}"
    if overhead.flagged:
        names = ", ".join(n.upper() for n in overhead.flagged)
        text += f" — CLIENT OVERHEAD: adds more than {overhead.max_added_pct:g}% to {names} (CLIENT_OVERHEAD_MAX_PCT)"
    return text


def _pct(client: float | None, server: float | None) -> float | None:
    if client is None or server is None or server == 0:
        return None
    return (client - server) / server * 100.0
