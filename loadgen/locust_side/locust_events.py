"""A request row as Locust statistics: one ``LLM e2e`` request per chat request, fired through ``events.request``
(so it aggregates on a distributed master; Locust's own timer would stop at a stream's headers). TTFT, TPOT, ITL
and tok/s go to :class:`loadgen.locust_side.llm_stats.LlmStats`."""

from __future__ import annotations

from typing import Any

from core.records import RequestRecord

REQUEST_TYPE = "LLM"
REQUEST_NAME = "e2e"


class RequestCut(Exception):
    """The test stopped (Stop in the web UI, the end of ``--run-time``) while this request was still streaming."""


def _event(response_time_ms: float, exception: Exception | None) -> dict[str, Any]:
    # response_length 0: Locust shows bytes, an answer's size is in tokens (the LLM tab)
    return {"request_type": REQUEST_TYPE, "name": REQUEST_NAME, "response_time": response_time_ms,
            "response_length": 0, "exception": exception, "context": {}}  # fmt: skip


def request_event(record: RequestRecord) -> dict[str, Any]:
    """Keyword arguments of ``events.request.fire`` for ``record``: ``LLM e2e``, the end-to-end latency in ms (from
    the schedule in open loop), failed with ``<error_kind>: <error>`` when the request failed."""
    failure = None if record.ok else Exception(f"{record.error_kind}: {record.error}")
    return _event((record.e2e_ms or 0.0) + record.queue_delay_ms, failure)


def cut_event(elapsed_ms: float) -> dict[str, Any]:
    """The ``events.request.fire`` arguments of a request cut by the test's stop after ``elapsed_ms``: a failed
    ``LLM e2e`` saying so (listed under Failures instead of lost)."""
    return _event(elapsed_ms, RequestCut("cut by the test stop before the answer finished"))
