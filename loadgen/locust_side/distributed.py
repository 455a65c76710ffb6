"""Several Locust processes as one run: which share each worker sends, one open-loop schedule, one end.

At the test's start the master sends every worker its :class:`~loadgen.locust_side.process_state.Slot` (``llm_slot``,
with the schedule's start a moment ahead); each worker says ``llm_done`` after its last request and the master ends
the run when all have. A single process is slot 0 of 1 and ends the run itself. Tested by the integration tests
(importing Locust monkey-patches the process: only the locustfile imports this module).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Literal

import gevent
from gevent.event import Event
from locust.env import Environment
from locust.runners import LocalRunner, MasterRunner, WorkerRunner

from loadgen.locust_side.process_state import Slot, slots_for

SLOT_MESSAGE = "llm_slot"
DONE_MESSAGE = "llm_done"

log = logging.getLogger(__name__)


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
            workers = [c.id for c in runner.clients.ready + runner.clients.spawning + runner.clients.running]
            self._done_workers, self._expected = set(), len(workers)
            for wid, slot in slots_for(workers, time.time()).items():
                runner.send_message(SLOT_MESSAGE, {"slot": slot.slot, "slots": slot.slots, "start_at": slot.start_at},
                                    client_id=wid)  # fmt: skip
        elif isinstance(runner, LocalRunner):
            self._set(Slot())

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
