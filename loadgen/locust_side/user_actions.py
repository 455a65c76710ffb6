"""What a Locust user does, as plain functions: send one planned request, and dispatch open-loop arrivals.

The locustfile only declares the user classes and hooks and calls these (tested without Locust's runner).
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import gevent
from gevent.pool import Pool

from core.records import RequestRecord, engine_unreachable
from core.report_schema import BenchmarkConfig
from core.streamtiming import StreamTimer
from loadgen.locust_side.process_state import RunState, Slot, share
from loadgen.request.client import chat_payload, partial_fields, stream_chat
from loadgen.request.transport import Transport
from loadgen.workloads.loadshape import plan_arrival_gaps
from loadgen.workloads.sessions import Session
from loadgen.workloads.workload import WorkItem

OPEN_LOOP_MAX_IN_FLIGHT = 10_000
CONNECTION_BACKOFF_S = 0.5  # a closed-loop user's pause after a connection-level failure (no tight retry loop)


def backoff_s(record: RequestRecord) -> float:
    """How long a closed-loop user waits before its next request after ``record``, s: :data:`CONNECTION_BACKOFF_S`
    after a failure that reached no engine (refused, reset, DNS, or the router's "no available workers": a dead
    server would otherwise be retried as fast as the machine allows, flooding the rows), else 0 (the closed loop sends
    at once)."""
    return CONNECTION_BACKOFF_S if engine_unreachable(record.error_kind, record.error) else 0.0


def payload_for(plan: BenchmarkConfig, item: WorkItem) -> dict[str, Any]:
    """The chat request of ``item`` under ``plan`` (model, temperature, exact lengths with IGNORE_EOS)."""
    extra: dict[str, Any] = {"ignore_eos": True, "min_tokens": item.max_tokens} if plan.ignore_eos else {}
    return chat_payload(plan.model, item.prompt.messages, item.max_tokens, plan.temperature, **extra)


def send(
    state: RunState,
    session: Transport,
    host: str,
    item: WorkItem,
    scheduled_at: float | None = None,
    on_cut: Callable[[float], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> RequestRecord:
    """Send one request with the shared request function, label it with its workload item, save the row.

    A request cancelled by the end of the run (Locust kills the greenlet: ``GreenletExit``, or Ctrl-C) is saved as
    an ``incomplete`` row naming its cause (``state.cut_cause``; logged ``cancelled`` in ``requests.jsonl``) before
    the cancellation goes on, so no request is ever lost; ``on_cut(elapsed_ms)`` then tells Locust's web UI it was
    cut (the locustfile reports it).
    """
    plan = state.plan
    request_id = uuid.uuid4().hex
    started_at = time.time()
    started = clock()
    labels: dict[str, Any] = {
        "scheduled_at": scheduled_at,
        "task": item.prompt.task,
        "input_bucket": item.prompt.bucket,
        "session_id": item.session_id,
        "turn": item.turn,
        "think_time_s": item.think_time_s,
    }
    answer: list[str] | None = [] if item.conversation is not None else None
    timer = StreamTimer(clock)
    state.in_flight += 1
    try:
        record = stream_chat(
            session, host, payload_for(plan, item), timeout_s=plan.request_timeout_s, request_id=request_id,
            answer=answer, timer=timer,
        )
    except BaseException as exc:  # GreenletExit / KeyboardInterrupt: the run is ending
        cut_ms = (clock() - started) * 1000.0  # one figure for the row and for Locust's stats (once 33 ms apart)
        state.in_flight -= 1
        state.save(
            RequestRecord(
                request_id=request_id,
                started_at=started_at,
                ok=False,
                e2e_ms=cut_ms,
                max_tokens=item.max_tokens,
                error_kind="incomplete",
                error=f"cancelled by {state.cut_cause} ({type(exc).__name__})",
                **partial_fields(timer),
                **labels,
            )
        )
        if on_cut is not None:
            on_cut(cut_ms)
        raise
    state.in_flight -= 1
    record = record.model_copy(update=labels)
    state.save(record)
    if item.conversation is not None:  # the next turn carries this answer
        item.conversation.answered(item, record.ok, "".join(answer or []))
    return record


def converse(
    state: RunState,
    session: Session,
    first: WorkItem,
    scheduled_at: float,
    one: Callable[[WorkItem, float], object],
    deadline: float | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = gevent.sleep,
) -> int:
    """Open loop: one conversation arriving at ``scheduled_at`` (Unix time, s): its first turn built on ``first``,
    each next turn sent only once the previous answer is in (``one`` returns after it, and :func:`send` hands the
    answer to the session) plus the session's think time; each turn's latencies count from the time it was meant to
    leave. It ends after its planned turns, at a failed turn, or when its next turn would leave after ``deadline``
    (DURATION's end); turns not sent leave the process's issued count.

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


def arrivals(
    plan: BenchmarkConfig, slot: Slot, trace: Sequence[tuple[float, WorkItem]] = ()
) -> Iterator[tuple[int, float]]:
    """This process's arrivals of the run's one schedule: ``(request number, seconds after the start)`` each.

    The schedule (RATE, BURSTINESS, SEED, a RATE_END ramp: :func:`loadgen.workloads.loadshape.plan_arrival_gaps`) is
    generated whole in every process; process ``slot`` of ``slots`` takes arrivals ``slot, slot + slots, …``, so the
    processes together send the one schedule.

    A trace replay (TRACE) has the trace's times instead (``trace``: :attr:`RunState.trace`).

    Raises:
        ValueError: the plan has no RATE.
    """
    if trace:
        return itertools.islice(enumerate(at for at, _ in trace), slot.slot, None, slot.slots)
    offsets = itertools.accumulate(plan_arrival_gaps(plan))
    return itertools.islice(enumerate(offsets), slot.slot, None, slot.slots)


def dispatch_open_loop(
    state: RunState,
    one: Callable[[WorkItem, float], None],
    clock: Callable[[], float] = time.time,
) -> int:
    """Send this process's share of the scheduled arrivals (RATE, BURSTINESS, SEED; see :func:`arrivals`), each in
    its own greenlet, so a slow server cannot slow the arrivals.

    The schedule starts at the slot's ``start_at`` (shared by every process) or now. With ``max_in_flight``
    (MAX_IN_FLIGHT, split between the processes like the requests) an arrival waits for a free slot, at most until the
    end of the run; its latencies still count from its scheduled time. With ``rate_end_req_per_sec`` the rate ramps
    linearly (:func:`loadgen.workloads.loadshape.plan_arrival_gaps`). Dispatch stops when the request budget is spent
    or, with a duration, at ``start + duration_s`` (no arrival is scheduled after it); requests still in flight then may
    finish for ``drain_s`` and are cancelled after that (saved as ``incomplete`` rows by :func:`send`).
    ``one(item, scheduled_at)`` sends one request. With SESSION_TURNS > 1 each arrival is a conversation
    (:func:`converse`, in its own greenlet; RATE is conversations per second, MAX_IN_FLIGHT caps conversations) and
    this process's share of REQUESTS counts their turns, the last conversation cut to fit.

    Returns:
        How many requests were cancelled after the drain.
    When the dispatcher itself is killed (the test stops), the requests in flight are killed too, so each is
    reported as cut rather than finishing unseen after the stop.
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
