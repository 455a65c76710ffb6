"""What a Locust user does, as plain functions (tested without Locust's runner): send one planned request, dispatch
open-loop arrivals, report a row to Locust's statistics, and cancel at once on SIGINT.

A row is one ``LLM e2e`` request fired through ``events.request`` (so it aggregates on a distributed master; Locust's
own timer would stop at a stream's headers); TTFT, TPOT, ITL and tok/s go to
:class:`loadgen.locust_side.llm_stats.LlmStats`. The benchmark stops a run early (Ctrl-C, SIGTERM, server down,
watchdog) with SIGINT to Locust's process group: instead of draining for ``--stop-timeout`` the requests in flight are
cancelled and saved naming :data:`CANCEL_CAUSE`. A ``--run-time`` end sends no signal and keeps its drain (DRAIN_S).
"""

from __future__ import annotations

import itertools
import signal
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import FrameType
from typing import Any

import gevent
from gevent.pool import Pool

from core.distributions import arrival_gaps_s, ramp_arrival_gaps_s
from core.records import RequestRecord, engine_unreachable
from core.report_schema import BenchmarkConfig
from core.streamtiming import StreamTimer
from loadgen.locust_side.process_state import RunState, Slot, share
from loadgen.request.client import chat_payload, partial_fields, stream_chat
from loadgen.request.transport import Transport
from loadgen.workloads.workload import Session, WorkItem

OPEN_LOOP_MAX_IN_FLIGHT = 10_000
CONNECTION_BACKOFF_S = 0.5  # a closed-loop user's pause after a connection-level failure (no tight retry loop)
CANCEL_CAUSE = "the run being stopped early (SIGINT: Ctrl-C, SIGTERM, server down or watchdog)"
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


def cancel_on_sigint(environment: Any, on_cancel: Callable[[], None] = lambda: None) -> None:
    """Install (in the main thread) a SIGINT handler: ``environment.stop_timeout`` becomes 0, ``on_cancel()`` runs,
    then the previous handler (KeyboardInterrupt also where SIGINT was ignored: only the benchmark sends it)."""
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: FrameType | None) -> None:
        environment.stop_timeout = 0.0
        on_cancel()
        if callable(previous):
            previous(signum, frame)
        else:  # SIG_IGN inherited from a benchmark run as a background job: the benchmark's stop still stops
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)


def backoff_s(record: RequestRecord) -> float:
    """A closed-loop user's pause after ``record``, s: :data:`CONNECTION_BACKOFF_S` after a failure that reached no
    engine (refused, reset, DNS, the router's "no available workers": no flood of rows from a dead server), else 0."""
    return CONNECTION_BACKOFF_S if engine_unreachable(record.error_kind, record.error) else 0.0


def payload_for(plan: BenchmarkConfig, item: WorkItem) -> dict[str, Any]:
    """The chat request of ``item`` under ``plan`` (model, temperature, exact lengths with IGNORE_EOS)."""
    extra: dict[str, Any] = {"ignore_eos": True, "min_tokens": item.max_tokens} if plan.ignore_eos else {}
    return chat_payload(plan.model, item.prompt.messages, item.max_tokens, plan.temperature, **extra)


def send(state: RunState, session: Transport, host: str, item: WorkItem, scheduled_at: float | None = None,
         on_cut: Callable[[float], None] | None = None,
         clock: Callable[[], float] = time.perf_counter) -> RequestRecord:
    """Send one request, label it with its workload item, save the row.

    A request cancelled by the run's end (``GreenletExit`` or Ctrl-C) is first saved as an ``incomplete`` row naming
    ``state.cut_cause``, then ``on_cut(elapsed_ms)`` runs (Locust's web UI), then the cancellation goes on.
    """
    plan = state.plan
    request_id = uuid.uuid4().hex
    started_at = time.time()
    started = clock()
    labels: dict[str, Any] = {"scheduled_at": scheduled_at, "task": item.prompt.task,
                              "input_bucket": item.prompt.bucket, "session_id": item.session_id, "turn": item.turn,
                              "think_time_s": item.think_time_s}
    answer: list[str] | None = [] if item.conversation is not None else None
    timer = StreamTimer(clock)
    state.in_flight += 1
    try:
        record = stream_chat(session, host, payload_for(plan, item), timeout_s=plan.request_timeout_s,
                             request_id=request_id, answer=answer, timer=timer)
    except BaseException as exc:  # GreenletExit / KeyboardInterrupt: the run is ending
        cut_ms = (clock() - started) * 1000.0  # one figure for the row and for Locust's stats (once 33 ms apart)
        state.in_flight -= 1
        error = f"cancelled by {state.cut_cause} ({type(exc).__name__})"
        state.save(RequestRecord(request_id=request_id, started_at=started_at, ok=False, e2e_ms=cut_ms,
                                 max_tokens=item.max_tokens, error_kind="incomplete", error=error,
                                 **partial_fields(timer), **labels))
        if on_cut is not None:
            on_cut(cut_ms)
        raise
    state.in_flight -= 1
    record = record.model_copy(update=labels)
    state.save(record)
    if item.conversation is not None:  # the next turn carries this answer
        item.conversation.answered(item, record.ok, "".join(answer or []))
    return record


def converse(state: RunState, session: Session, first: WorkItem, scheduled_at: float,
             one: Callable[[WorkItem, float], object], deadline: float | None = None,
             clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = gevent.sleep) -> int:
    """Open loop: one conversation arriving at ``scheduled_at`` (Unix s), built on ``first``; each next turn leaves
    after the previous answer (``one`` returns after it) plus the think time, its latencies counted from then. It
    ends after its planned turns, a failed turn, or past ``deadline``; unsent turns leave ``state.issued``.

    Returns:
        The turns sent.
    """
    item = session.next_item(first)
    at = scheduled_at
    try:
        while True:
            one(item, at)
            if session.over:
                break
            pause = session.pending_think_s or 0.0
            at = clock() + pause
            if deadline is not None and at > deadline:
                break
            sleep(pause)
            item = session.next_item()
    finally:
        state.issued -= session.unsent  # a failed turn, or the window's end: these turns are never sent
    return session.turn


def arrivals(plan: BenchmarkConfig, slot: Slot,
             trace: Sequence[tuple[float, WorkItem]] = ()) -> Iterator[tuple[int, float]]:
    """This process's arrivals, ``(request number, seconds after the start)``: every ``slots``-th, from ``slot``, of
    the run's one schedule: the ``trace``'s times, else gamma gaps at RATE (shape BURSTINESS, seeded by SEED), or a
    linear ramp from RATE to RATE_END over DURATION (else over REQUESTS arrivals).

    Raises:
        ValueError: the plan has no RATE, or a rate or burstiness that is not finite and > 0.
    """
    rate, burstiness = plan.rate_req_per_sec, plan.burstiness or 1.0
    if trace:
        offsets: Iterable[float] = (at for at, _ in trace)
    elif rate is None:
        raise ValueError("an open-loop run needs RATE (requests per second)")
    elif plan.rate_end_req_per_sec is None:
        offsets = itertools.accumulate(arrival_gaps_s(rate, burstiness, plan.seed))
    else:
        offsets = itertools.accumulate(ramp_arrival_gaps_s(rate, plan.rate_end_req_per_sec, burstiness, plan.seed,
                                                           duration_s=plan.duration_s, requests=plan.requests))
    return itertools.islice(enumerate(offsets), slot.slot, None, slot.slots)


def dispatch_open_loop(state: RunState, one: Callable[[WorkItem, float], None],
                       clock: Callable[[], float] = time.time) -> int:
    """Send this process's share of the arrivals (:func:`arrivals`) with ``one(item, scheduled_at)``, each in its
    own greenlet, from the slot's ``start_at`` (or now).

    MAX_IN_FLIGHT (split like the requests) makes an arrival wait for a free slot until the run's end, its latencies
    still counted from its schedule. Dispatch stops at the request budget or ``start + duration_s``; requests then in
    flight get ``drain_s`` and are cancelled after (rows by :func:`send`), as they are when the dispatcher is killed.
    With SESSION_TURNS > 1 each arrival is a conversation (:func:`converse`) and the share counts turns.

    Returns:
        How many requests were cancelled after the drain.
    """

    plan = state.plan
    schedule = arrivals(plan, state.slot, state.trace)
    cap = max(1, share(plan.max_in_flight, state.slot)) if plan.max_in_flight else OPEN_LOOP_MAX_IN_FLIGHT
    pool = Pool(cap)  # a full pool holds the next arrival until a slot frees
    start = state.slot.start_at if state.slot.start_at is not None else clock()
    deadline = start + plan.duration_s if plan.duration_s else None
    budget = state.max_requests or None
    sessions = plan.session_turns > 1  # each arrival is a conversation: its turns count against this share
    try:
        for k, offset in schedule:
            at = start + offset
            spent = state.budget is not None and state.issued >= state.budget if sessions else (
                budget is not None and k >= budget)  # fmt: skip
            if (deadline is not None and at > deadline) or spent:
                break
            item = state.item(k)
            gevent.sleep(max(0.0, at - clock()))
            if deadline is not None and not pool.wait_available(timeout=max(0.0, deadline - clock())):
                break  # capped (MAX_IN_FLIGHT) and no slot freed before the end: later arrivals are not sent
            if sessions:
                session = state.open_session(k, item)
                if state.budget is not None:
                    session.cap(state.budget - state.issued)  # the last conversation ends with the budget
                state.issued += session.planned
                pool.spawn(converse, state, session, item, at, one, deadline, clock)
                continue
            state.issued += 1
            pool.spawn(one, item, at)
        pool.join(timeout=plan.drain_s if deadline is not None else None)
        return len(pool)
    finally:
        pool.kill(block=True)  # also when the dispatcher itself is stopped (Ctrl-C): each request saves its row
