"""Several Locust processes as one run: which share each worker sends, one open-loop schedule, one end; and load
workers on other hosts (EXPECT_WORKERS): the Locust messages of joining, clock alignment and rows.

At the test's start the master sends every worker its :class:`~loadgen.locust_side.process_state.Slot` (``llm_slot``,
with the schedule's start a moment ahead); each worker says ``llm_done`` after its last request and the master ends
the run when all have. A single process is slot 0 of 1 and ends the run itself (:class:`Coordinator`).

With ``--join`` every worker joins before it gets a share (:class:`JoiningCoordinator`): ``llm_join``, then
:data:`PROBES` rounds of ``llm_challenge`` and ``llm_proof`` (:mod:`loadgen.locust_side.joining`; a failed proof is
told to quit); once EXPECT_WORKERS + WORKERS have joined, ``llm_slot`` also carries the plan, the dataset's text and
the offset; the worker sends ``llm_rows`` batches, ``llm_load`` and ``llm_done``, the master appends them (rows in its
clock). Tested by the integration tests (importing Locust monkey-patches the process).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import gevent
from gevent.event import Event
from locust.env import Environment
from locust.runners import LocalRunner, MasterRunner, WorkerRunner

from core.logrotate import append_rotating
from core.report_schema import BenchmarkConfig
from loadgen.locust_side.joining import (
    PROBES,
    ClockProbe,
    RowBatcher,
    best_offset,
    master_time_row,
    nonce,
    proof,
    verify,
)
from loadgen.locust_side.process_state import Slot, slots_for
from loadgen.plan import dataset_path

JOIN, CHALLENGE, PROOF, ROWS, LOAD = "llm_join", "llm_challenge", "llm_proof", "llm_rows", "llm_load"
SLOT_MESSAGE, DONE_MESSAGE = "llm_slot", "llm_done"
log = logging.getLogger(__name__)


def append_lines(path: str, lines: list[str]) -> None:
    """Append ``lines`` to the file ``path`` in one ``O_APPEND`` write (nothing without a path or lines)."""
    if path and lines:
        append_rotating(Path(path), "".join(line + "\n" for line in lines).encode(), None, 0)


class Coordinator:
    """This process's part in the run's coordination (made at ``init``; the runner decides the role);
    ``on_slot(slot)`` runs once the slot is known."""

    def __init__(self, environment: Environment, on_slot: Callable[[Slot], None]) -> None:
        self.environment = environment
        self.on_slot = on_slot
        self.ready = Event()
        self._done_sent = False
        self._done_workers: set[str] = set()
        self._expected = 0
        runner = environment.runner
        if isinstance(runner, WorkerRunner):
            runner.register_message(SLOT_MESSAGE, self._slot_message)
        elif isinstance(runner, MasterRunner):
            runner.register_message(DONE_MESSAGE, self._done_message)

    @property
    def role(self) -> Literal["master", "worker", "local"]:
        """``master``, ``worker`` or ``local``."""
        runner = self.environment.runner
        if isinstance(runner, MasterRunner):
            return "master"
        return "worker" if isinstance(runner, WorkerRunner) else "local"

    def test_start(self) -> None:
        """Master: hand out the slots. Local: this process is slot 0 of 1. Worker: wait for the master's message."""
        runner = self.environment.runner
        self._done_sent = False
        if isinstance(runner, MasterRunner):
            clients = runner.clients
            self._send_slots(runner, [c.id for c in clients.ready + clients.spawning + clients.running])
        elif isinstance(runner, LocalRunner):
            self._set(Slot())

    def _send_slots(self, runner: MasterRunner, workers: list[str],
                    extra: Callable[[str], dict[str, Any]] = lambda wid: {}) -> None:
        """Master: each of ``workers`` gets its slot (with ``extra(worker id)``), all one schedule start."""
        self._done_workers, self._expected = set(), len(workers)
        for wid, slot in slots_for(workers, time.time()).items():
            data = {"slot": slot.slot, "slots": slot.slots, "start_at": slot.start_at, **extra(wid)}
            runner.send_message(SLOT_MESSAGE, data, client_id=wid)

    def test_stop(self) -> None:
        """The next test waits for its own slot."""
        self.ready.clear()

    def _set(self, slot: Slot) -> None:
        self.on_slot(slot)
        self.ready.set()

    def _slot_message(self, environment: Environment, msg: Any, **_: Any) -> None:
        data = msg.data
        self._set(Slot(int(data["slot"]), int(data["slots"]), data.get("start_at")))

    def finish(self) -> None:
        """This process sent its share and every request has ended: a local run ends; a worker tells the master."""
        runner = self.environment.runner
        if self._done_sent or runner is None:
            return
        self._done_sent = True  # once: two quits at once would both stop the test (Locust fires test_stop twice)
        if isinstance(runner, WorkerRunner):
            runner.send_message(DONE_MESSAGE, {"client_id": runner.client_id})
        else:
            gevent.spawn(runner.quit)

    def _done_message(self, environment: Environment, msg: Any, **_: Any) -> None:
        self._done_workers.add(str(msg.node_id))
        log.info("worker %s done (%d of %d)", msg.node_id, len(self._done_workers), self._expected)
        runner = self.environment.runner
        if runner is not None and len(self._done_workers) >= self._expected and not self._done_sent:
            self._done_sent = True
            gevent.spawn(runner.quit)


@dataclass
class _Pending:
    """A worker that has asked to join: what it said, the challenge in flight and the clock probes so far."""

    info: dict[str, Any]
    challenge: str = ""
    sent: float = 0.0
    probes: list[ClockProbe] = field(default_factory=list)


class JoiningCoordinator(Coordinator):
    """:class:`~loadgen.locust_side.remote.Coordinator` for workers that must join (see the module): ``token``
    is the sidecar token they prove, ``expected`` how many must join (master), ``host`` this host's row name."""

    def __init__(self, environment: Environment, on_slot: Callable[[Slot], None], *, token: str, expected: int,
                 host: str, plan: BenchmarkConfig | None, timeout_s: float = 120.0) -> None:  # fmt: skip
        super().__init__(environment, on_slot)
        self.token = token
        self.expected_joins = expected
        self.host = host
        self.master_plan = plan  # master: the plan it hands out
        self.timeout_s = timeout_s
        self.plan: BenchmarkConfig | None = None  # worker: the master's plan
        self.offset_s = 0.0  # worker: its clock minus the master's
        self.joined: dict[str, dict[str, Any]] = {}  # master: client id -> host, pid, offset_s, rtt_s
        self._pending: dict[str, _Pending] = {}
        self.batcher: RowBatcher | None = None
        self.load_sent = False
        self.max_requests = 0  # worker: the run's request budget (all processes), from the master
        self.load_of: Callable[[], str] | None = None  # worker: its CPU and lag so far, as JSON (the locustfile's)
        runner = environment.runner
        if isinstance(runner, MasterRunner):
            for name, handler in ((JOIN, self._join), (PROOF, self._proof), (ROWS, self._rows), (LOAD, self._load)):
                runner.register_message(name, handler)
        elif isinstance(runner, WorkerRunner):
            runner.register_message(CHALLENGE, self._challenge)
            self.batcher = RowBatcher(lambda rows: runner.send_message(ROWS, {"rows": rows}), time.monotonic)
            gevent.spawn_later(0.2, runner.send_message, JOIN, {"host": host, "pid": os.getpid()})
            gevent.spawn(self._ticker)

    def _runner(self) -> Any:
        runner = self.environment.runner
        assert runner is not None, "Locust has no runner yet"
        return runner

    # --- master -------------------------------------------------------------------------------------------------
    def _join(self, environment: Environment, msg: Any, **_: Any) -> None:
        self.joined.pop(msg.node_id, None)
        self._pending[msg.node_id] = _Pending(info=dict(msg.data or {}))
        self._send_challenge(msg.node_id)

    def _send_challenge(self, client_id: str) -> None:
        pending = self._pending[client_id]
        pending.challenge, pending.sent = nonce(), time.time()
        self._runner().send_message(CHALLENGE, {"nonce": pending.challenge}, client_id=client_id)

    def _proof(self, environment: Environment, msg: Any, **_: Any) -> None:
        received = time.time()
        client_id, data = msg.node_id, msg.data or {}
        pending = self._pending.get(client_id)
        if pending is None or data.get("nonce") != pending.challenge or not verify(
            self.token, pending.challenge, client_id, str(data.get("proof", ""))
        ):
            log.error("load worker %s could not prove the sidecar token: told to quit", client_id)
            self._pending.pop(client_id, None)
            self._runner().send_message("quit", None, client_id=client_id)
            return
        pending.probes.append(ClockProbe(t0=pending.sent, tw=float(data["tw"]), t1=received))
        if len(pending.probes) < PROBES:
            self._send_challenge(client_id)
            return
        best = best_offset(pending.probes)
        info = self._pending.pop(client_id).info
        self.joined[client_id] = {"host": info.get("host"), "pid": info.get("pid"), "offset_s": best.offset_s,
                                  "rtt_s": best.rtt_s}  # fmt: skip
        log.warning("load worker joined: %s (host %s, clock offset %+.1f ms ± %.1f ms)", client_id, info.get("host"),
                    best.offset_s * 1000, best.rtt_s * 500)  # fmt: skip

    def test_start(self) -> None:
        runner = self.environment.runner
        self.load_sent = False
        if not isinstance(runner, MasterRunner):
            super().test_start()
            return
        self._done_sent = False
        gevent.spawn(self._hand_out)

    def _hand_out(self) -> None:
        runner = self._runner()
        deadline = time.monotonic() + self.timeout_s
        while len(self.joined) < self.expected_joins:  # connected (Locust's wait) is not joined (the proof)
            if time.monotonic() > deadline:
                log.error("only %d of %d load workers joined within %.0f s (proved the sidecar token)",
                          len(self.joined), self.expected_joins, self.timeout_s)  # fmt: skip
                gevent.spawn(runner.quit)
                return
            gevent.sleep(0.2)
        plan_json = self._plan_json()
        plan_json["max_requests"] = int(getattr(self.environment.parsed_options, "max_requests", 0) or 0)
        self._send_slots(runner, list(self.joined), lambda wid: {"offset_s": self.joined[wid]["offset_s"], **plan_json})

    def _plan_json(self) -> dict[str, Any]:
        plan = self.master_plan
        if plan is None:
            return {}
        path = dataset_path(plan)
        return {"plan": plan.model_dump_json(), "dataset_name": path.name,
                "dataset": path.read_text(encoding="utf-8")}  # fmt: skip

    def _rows(self, environment: Environment, msg: Any, **_: Any) -> None:
        offset = float(self.joined.get(msg.node_id, {}).get("offset_s", 0.0))
        options = environment.parsed_options
        append_lines(getattr(options, "records_file", ""), [master_time_row(row, offset) for row in msg.data["rows"]])

    def _load(self, environment: Environment, msg: Any, **_: Any) -> None:
        append_lines(getattr(environment.parsed_options, "client_file", ""), [str(msg.data["load"])])

    # --- worker -------------------------------------------------------------------------------------------------
    def _challenge(self, environment: Environment, msg: Any, **_: Any) -> None:
        runner = self._runner()
        answer = proof(self.token, msg.data["nonce"], runner.client_id)
        runner.send_message(PROOF, {"nonce": msg.data["nonce"], "proof": answer, "tw": time.time()})

    def _slot_message(self, environment: Environment, msg: Any, **_: Any) -> None:
        data = msg.data
        self.offset_s = float(data.get("offset_s") or 0.0)
        self.max_requests = int(data.get("max_requests") or 0)
        if data.get("plan"):
            folder = Path(tempfile.mkdtemp(prefix="llm-worker-"))
            dataset = folder / str(data.get("dataset_name") or "dataset.jsonl")
            dataset.write_text(str(data.get("dataset") or ""), encoding="utf-8")
            plan = BenchmarkConfig.model_validate_json(data["plan"])
            self.plan = plan.model_copy(update={"dataset_file": str(dataset)})
        start_at = data.get("start_at")
        self._set(Slot(int(data["slot"]), int(data["slots"]), None if start_at is None else start_at + self.offset_s))

    def _ticker(self) -> None:
        while True:
            gevent.sleep(0.1)
            if self.batcher is not None and self.batcher.due():
                self.batcher.flush()

    def send_row(self, row_json: str) -> None:
        """A worker's row, on its way to the master."""
        assert self.batcher is not None
        self.batcher.add(row_json)

    def flush(self) -> None:
        """Send the rows still queued (at the test's stop, before Locust reports the worker stopped)."""
        if self.batcher is not None:
            self.batcher.flush()

    def send_load(self, load_json: str) -> None:
        """This worker's CPU and lag (once per test), after its rows."""
        runner = self.environment.runner
        if isinstance(runner, WorkerRunner) and not self.load_sent:
            self.flush()
            runner.send_message(LOAD, {"load": load_json})
            self.load_sent = True

    def finish(self) -> None:
        """This worker's share is done: its last rows, its load, then ``done`` (one ordered connection)."""
        self.flush()
        if self.load_of is not None:
            self.send_load(self.load_of())
        super().finish()
