"""Per-process bookkeeping of a Locust run: the plan, this process's share of the requests, the rows file, the log,
and how late the process runs.

Every process holds the same plan and seeded workload; process ``slot`` of ``slots`` takes request numbers ``slot,
slot + slots, …`` and request ``k`` is always the workload's ``k``-th item, so REQUESTS=N gives the same N requests
whatever the number of processes. Plain code, unit-tested without Locust.

The lag (what the client may add to each TTFT and ITL): a greenlet asks to wake every ``interval_s`` and records how
late it woke (wrk2's and Node's event-loop lag); a longer stall is back-filled as HdrHistogram's
``recordValueWithExpectedInterval`` does. Idle wake-ups are not recorded. CPU counts while requests are in flight.
"""

from __future__ import annotations

import os
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import gevent

from core.clientview import ProcessLoad
from core.distributions import think_sampler
from core.logrotate import RotatingWriter
from core.records import RequestRecord, latency_stats
from core.report_schema import BenchmarkConfig
from core.requestlog import RequestLog, RequestLogLine
from loadgen.plan import run_id_of, sampler_for, workload_prompts
from loadgen.workloads.dataset import Prompt
from loadgen.workloads.randomdata import load_prefixes, trace_requests, with_prefix
from loadgen.workloads.workload import ConversationDeck, Session, WorkItem, followups_of


@dataclass(frozen=True)
class Slot:
    """This process's place among the load processes: ``slot`` of ``slots``, and the shared start of the open-loop
    schedule (Unix time, s; None: start now)."""

    slot: int = 0
    slots: int = 1
    start_at: float | None = None


LAG_INTERVAL_S = 0.005
START_DELAY_S = 1.0  # the open-loop schedule starts this long after the master hands out the slots


def slots_for(worker_ids: Sequence[str], now: float, delay_s: float = START_DELAY_S) -> dict[str, Slot]:
    """Slot of each worker (in the order of their ids), all with the same schedule start ``now + delay_s`` (pure)."""
    ordered = sorted(worker_ids)
    return {wid: Slot(i, len(ordered), now + delay_s) for i, wid in enumerate(ordered)}


def share(total: int, slot: Slot) -> int:
    """How many of ``total`` requests process ``slot`` sends (the shares add up to ``total``)."""
    return len(range(slot.slot, total, slot.slots))


class RunState:
    """One Locust process's run: the workload of ``plan``, its share of the request budget and where rows go (also
    ``requests_log``, ``logs/requests.jsonl``); ``prompts``: as the plan file holds them (None: parse the dataset)."""

    def __init__(self, plan: BenchmarkConfig, requests_log: RequestLog,
                 prompts: Sequence[Prompt] | None = None) -> None:
        self.plan = plan
        self.requests_log = requests_log
        self.prompts = list(prompts) if prompts is not None else workload_prompts(plan)
        self._prefixes = load_prefixes(plan)  # PREFIX_LEN: request k carries prefix k mod PREFIX_COUNT
        self.trace = trace_requests(plan)  # TRACE: request k is row k, at its time (s after the start)
        self._fd: int | None = None
        self._log: RotatingWriter | None = None
        # conversations: real or drawn follow-ups, as the benchmark resolved SESSION_FOLLOWUPS (else auto here)
        self.followups = followups_of(self.prompts, plan.session_turns, plan.session_followups or "auto")
        self._deck = ConversationDeck(self.prompts, plan.seed) if self.followups == "dataset" else None
        self.host: str | None = None  # what every row names as its sender (set by the locustfile)
        self.process: str | None = None
        self.sink: Callable[[str], None] | None = None  # a remote worker's rows go to the master, not to a file
        self.cut_cause = "the end of the run"  # what a cancelled row names (SIGINT: loadgen.locust_side.user_actions)
        self.begin(0, None)

    def begin(self, max_requests: int, records_path: Path | None, slot: Slot | None = None) -> None:
        """Reset for a new test: ``max_requests`` for the whole run (0 = unlimited), the rows file (None = keep
        none) and this process's ``slot``."""
        self.max_requests = max_requests
        self.slot = slot or Slot()
        self.issued = self.finished = self.in_flight = 0
        self._workload = sampler_for(self.plan, self.plan.seed, self.prompts)
        self._drawn = 0  # items of the seeded workload drawn so far
        self.sessions: dict[int, Session] = {}  # closed loop: each user's conversation
        self._sessions_started = 0
        self.close()
        self.closed = False
        self.records_path = records_path

    @property
    def budget(self) -> int | None:
        """This process's share of the request budget; None without one."""
        return share(self.max_requests, self.slot) if self.max_requests else None

    def number(self, i: int) -> int:
        """The global request number of this process's ``i``-th request (0-based)."""
        return self.slot.slot + i * self.slot.slots

    def take_ticket(self) -> int | None:
        """The global number of the next request to send, or None when this process's share is spent."""
        budget = self.budget
        if budget is not None and self.issued >= budget:
            return None
        k = self.number(self.issued)
        self.issued += 1
        return k

    def item(self, k: int) -> WorkItem:
        """Request number ``k`` of the seeded workload (numbers must come in increasing order)."""
        if k < self._drawn:
            raise ValueError(f"request {k} was already drawn (next is {self._drawn})")
        while self._drawn < k:  # the other processes' requests
            self._workload.next()
            self._drawn += 1
        self._drawn += 1
        if self.trace:
            return self.trace[k][1]
        return with_prefix(self._workload.next(), k, self._prefixes)

    def next_item(self, user: object, k: int) -> WorkItem:
        """Request ``k`` of closed-loop ``user``: workload item ``k``, or with SESSION_TURNS > 1 the next turn of the
        user's conversation built on it (a new conversation, numbered by this slot, when the last one ended)."""
        draw = self.item(k)
        if self.plan.session_turns <= 1:
            return draw
        session = self.sessions.get(id(user))
        if session is None or session.over:
            session = self.sessions[id(user)] = self.open_session(self.number(self._sessions_started), draw)
            self._sessions_started += 1
        return session.next_item(draw)

    def open_session(self, number: int, draw: WorkItem) -> Session:
        """Conversation ``number`` of the run (the same in every process): the deck's card ``number``, else opening
        with ``draw``'s prompt; its own draws and think times are seeded by SEED and ``number``."""
        opening = self._deck.card(number) if self._deck is not None else draw.prompt
        seed = [self.plan.seed, number]
        own_draw = self._workload.fork([*seed, 0]).next
        think_s = think_sampler(self.plan.think_time, [*seed, 1])
        return Session(number, opening, self.plan.session_turns, self.followups or "drawn", own_draw, think_s)

    def think_after(self, user: object) -> float:
        """Closed loop: ``user``'s pause before its next request, s (its conversation's think time, else 0)."""

        session = self.sessions.get(id(user))
        return 0.0 if session is None or session.over else session.pending_think_s or 0.0

    @property
    def all_done(self) -> bool:
        """This process's share is spent and every request it issued has finished."""
        budget = self.budget
        return budget is not None and self.issued >= budget and self.finished >= self.issued

    def save(self, record: RequestRecord) -> None:
        """Append one row to the rows file (if any) and to the request log.

        One ``O_APPEND`` write per row (descriptor kept open for the test): rows of concurrent greenlets and other
        processes never interleave.
        """
        self.finished += 1
        if record.error:  # a server may echo what it was sent: the request log's masking applies to rows too
            record = record.model_copy(update={"error": self.requests_log.redact(record.error)})
        if record.host is None and self.host is not None:
            record = record.model_copy(update={"host": self.host, "process": self.process})
        if self.sink is not None:
            self.sink(record.model_dump_json())
        elif self.records_path is not None:
            if self._fd is None:
                self._fd = os.open(self.records_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(self._fd, (record.model_dump_json() + "\n").encode())
        if self._log is None:
            self._log = self.requests_log.writer()
        run_id = run_id_of(self.records_path) if self.records_path else None
        line = RequestLogLine.from_record(record, "loadtest", self.plan.model, run_id)
        self._log.write(self.requests_log.encode(line))

    def close(self) -> None:
        """The test ended: close the rows file (a late row reopens it)."""
        self.closed = True
        if self._fd is not None:
            os.close(self._fd)
        if self._log is not None:
            self._log.close()
        self._fd = None
        self._log = None


class LagMonitor:
    """The lag sampler of one process (``start`` at the test's start, ``stop`` at its end): it wakes every
    ``interval_s`` and records only while ``busy()`` (requests in flight); ``clock`` gives monotonic seconds."""

    def __init__(self, busy: Callable[[], bool], interval_s: float = LAG_INTERVAL_S,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.busy = busy
        self.interval_s = interval_s
        self.clock = clock
        self.samples_ms = array("d")
        self._greenlet: gevent.Greenlet[[], None] | None = None
        self._cpu0 = self._wall0 = 0.0

    def start(self) -> None:
        """Start sampling (again: earlier samples are dropped)."""
        self.stop_sampling()
        self.samples_ms = array("d")
        self._cpu0, self._wall0 = time.process_time(), self.clock()
        self._greenlet = gevent.spawn(self._run)

    def _run(self) -> None:
        clock, interval, record = self.clock, self.interval_s, self.record
        due = clock() + interval
        while True:
            gevent.sleep(max(0.0, due - clock()))
            now = clock()
            if self.busy():
                record(now - due)
            due = now + interval

    def record(self, late_s: float) -> None:
        """One wake-up ``late_s`` late (with the back-filled samples of a stall longer than the interval)."""
        late_ms, step_ms = late_s * 1000.0, self.interval_s * 1000.0
        self.samples_ms.append(max(0.0, late_ms))
        late_ms -= step_ms
        while late_ms > 0:
            self.samples_ms.append(late_ms)
            late_ms -= step_ms

    def stop_sampling(self) -> None:
        """Stop the greenlet (samples are kept)."""
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def summary(self, role: Literal["local", "worker"], slot: int, requests: int) -> ProcessLoad:
        """This process's load since :meth:`start`: CPU seconds (user + system), wall seconds and the lag."""
        return ProcessLoad(pid=os.getpid(), role=role, slot=slot, requests=requests,
                           cpu_s=time.process_time() - self._cpu0, wall_s=self.clock() - self._wall0,
                           lag=latency_stats(self.samples_ms))
