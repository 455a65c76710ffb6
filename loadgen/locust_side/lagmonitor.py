"""How late this Locust process runs: its event loop's scheduling lag (what the client may add to each TTFT and
ITL) and CPU use while requests are in flight.

A greenlet asks to wake every ``interval_s`` and records how late it woke (wrk2's and Node's event-loop lag); a longer
stall is back-filled as HdrHistogram's ``recordValueWithExpectedInterval`` does. Idle wake-ups are not recorded.
"""

from __future__ import annotations

import os
import time
from array import array
from collections.abc import Callable
from typing import Literal

import gevent

from core.clientview import ProcessLoad
from core.records import latency_stats

INTERVAL_S = 0.005


class LagMonitor:
    """The lag sampler of one process (``start`` at the test's start, ``stop`` at its end): it wakes every
    ``interval_s`` and records only while ``busy()`` (requests in flight); ``clock`` gives monotonic seconds."""

    def __init__(self, busy: Callable[[], bool], interval_s: float = INTERVAL_S,
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
