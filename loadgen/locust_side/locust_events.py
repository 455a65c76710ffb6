"""A request row as Locust statistics: one ``LLM e2e`` request per chat request, fired through ``events.request``
(so it aggregates on a distributed master), because Locust's own timer would stop at the response headers of a
stream. TTFT, TPOT, ITL and token throughput are not requests: they go to
:class:`loadgen.locust_side.llm_stats.LlmStats`."""

from __future__ import annotations

from typing import Any

from core.records import RequestRecord

REQUEST_TYPE = "LLM"
REQUEST_NAME = "e2e"


class RequestCut(Exception):
    """The test stopped (Stop in the web UI, the end of ``--run-time``) while this request was still streaming."""


def locust_events(record: RequestRecord) -> list[dict[str, Any]]:
    """Keyword arguments of the ``events.request.fire`` for ``record``: ``LLM e2e``, the end-to-end latency in ms
    (from the schedule in open loop), failed with ``<error_kind>: <error>`` when the request failed.

    ``response_length`` is 0: Locust shows it as bytes, and the answer's size is in tokens (the LLM tab).
    """
    failure = None if record.ok else Exception(f"{record.error_kind}: {record.error}")
    e2e_ms = (record.e2e_ms or 0.0) + record.queue_delay_ms
    return [
        {
            "request_type": REQUEST_TYPE,
            "name": REQUEST_NAME,
            "response_time": e2e_ms,
            "response_length": 0,
            "exception": failure,
            "context": {},
        }
    ]


def cut_event(elapsed_ms: float) -> dict[str, Any]:
    """The ``events.request.fire`` arguments of a request cut by the test's stop after ``elapsed_ms``: a failed
    ``LLM e2e`` whose cause says so (Locust lists it under Failures instead of losing it)."""
    return {
        "request_type": REQUEST_TYPE,
        "name": REQUEST_NAME,
        "response_time": elapsed_ms,
        "response_length": 0,
        "exception": RequestCut("cut by the test stop before the answer finished"),
        "context": {},
    }
