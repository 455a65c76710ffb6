"""A request row as Locust statistics: named ``LLM`` entries fired through ``events.request`` (so they aggregate on
a distributed master), because Locust's own timer would stop at the response headers of a stream."""

from __future__ import annotations

from typing import Any

from core.records import RequestRecord


def locust_events(record: RequestRecord) -> list[dict[str, Any]]:
    """Keyword arguments of each ``events.request.fire`` for ``record``: ``LLM e2e``, ``ttft``, ``tpot`` (ms) and
    ``output_tok/s`` (the request's decode speed, shown in Locust's response-time columns)."""
    failure = None if record.ok else Exception(f"{record.error_kind}: {record.error}")
    e2e = (record.e2e_ms or 0.0) + record.queue_delay_ms
    events: list[dict[str, Any]] = [
        {"name": "e2e", "response_time": e2e, "response_length": record.output_tokens or 0, "exception": failure}
    ]
    if record.ttft_ms is not None:
        events.append(
            {"name": "ttft", "response_time": record.ttft_ms + record.queue_delay_ms, "response_length": 0}
        )
    if record.tpot_ms is not None:
        events.append({"name": "tpot", "response_time": record.tpot_ms, "response_length": 0})
        if record.ok and record.output_tokens and record.tpot_ms > 0:
            speed = 1000.0 / record.tpot_ms
            events.append({"name": "output_tok/s", "response_time": speed, "response_length": record.output_tokens})
    return [{"request_type": "LLM", "exception": None, "context": {}, **event} for event in events]
