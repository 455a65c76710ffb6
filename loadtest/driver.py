"""What a Locust user does, as plain functions: send one planned request, and dispatch open-loop arrivals.

The locustfile only declares the user classes and hooks and calls these (tested without Locust's runner).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import gevent
import requests
from gevent import GreenletExit
from gevent.pool import Pool

from core.records import RequestRecord
from core.report_schema import BenchmarkConfig
from loadtest.client import chat_payload, stream_chat
from loadtest.runstate import RunState
from loadtest.workload import WorkItem, arrival_gaps_s

OPEN_LOOP_MAX_IN_FLIGHT = 10_000


def payload_for(plan: BenchmarkConfig, item: WorkItem) -> dict[str, Any]:
    """The chat request of ``item`` under ``plan`` (model, temperature, exact lengths with IGNORE_EOS)."""
    extra: dict[str, Any] = {"ignore_eos": True, "min_tokens": item.max_tokens} if plan.ignore_eos else {}
    return chat_payload(plan.model, item.prompt.messages, item.max_tokens, plan.temperature, **extra)


def send(
    state: RunState,
    session: requests.Session,
    host: str,
    item: WorkItem,
    scheduled_at: float | None = None,
    on_cut: Callable[[float], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> RequestRecord:
    """Send one request with the shared request function, label it with its workload item, save the row.

    When the test stops while the request streams (Locust kills the user's greenlet), the request is logged as
    ``cancelled`` in ``requests.jsonl`` (:meth:`RunState.log_cut`), ``on_cut(elapsed_ms)`` is called (the
    locustfile reports it to Locust), and ``GreenletExit`` propagates. It is no row: the run's rows hold finished
    requests only, as before.
    """
    plan = state.plan
    request_id = uuid.uuid4().hex
    started = clock()
    try:
        record = stream_chat(
            session, host, payload_for(plan, item), timeout_s=plan.request_timeout_s, request_id=request_id
        )
    except GreenletExit:
        elapsed_ms = (clock() - started) * 1000.0
        state.log_cut(request_id, elapsed_ms)
        if on_cut is not None:
            on_cut(elapsed_ms)
        raise
    record = record.model_copy(
        update={"scheduled_at": scheduled_at, "task": item.prompt.task, "input_bucket": item.prompt.bucket}
    )
    state.save(record)
    return record


def dispatch_open_loop(
    state: RunState,
    one: Callable[[WorkItem, float], None],
    clock: Callable[[], float] = time.time,
) -> None:
    """Send requests at the plan's scheduled arrival times (RATE, BURSTINESS, SEED), each in its own greenlet, so a
    slow server cannot slow the arrivals; returns when the budget is spent and every request has finished.

    ``one(item, scheduled_at)`` sends one request; arrivals are scheduled from the first one on, never waiting.
    When the dispatcher is killed (the test stops), the requests in flight are killed too, so each is reported as
    cut rather than finishing unseen after the stop.
    """
    plan = state.plan
    if plan.rate_req_per_sec is None:
        raise ValueError("an open-loop run needs RATE (requests per second)")
    pool = Pool(OPEN_LOOP_MAX_IN_FLIGHT)
    gaps = arrival_gaps_s(plan.rate_req_per_sec, plan.burstiness or 1.0, plan.seed)
    next_at = clock()
    try:
        while state.take_ticket():
            next_at += next(gaps)
            gevent.sleep(max(0.0, next_at - clock()))
            pool.spawn(one, state.workload.next(), next_at)
        pool.join()
    except GreenletExit:
        pool.kill(block=True)
        raise
