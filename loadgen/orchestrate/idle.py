"""Before a run: wait up to IDLE_WAIT_S for vLLM to be idle (other requests would count in its figures), or refuse."""

from __future__ import annotations

import time
from collections.abc import Callable

from core.engineload import EngineLoad, busy_refusal, engine_load, idle_decision
from core.replicas import engine_url, front_in_use, replicas, router_in_use
from core.settings import Settings
from loadgen.errors import BenchError
from loadgen.orchestrate.replica_watch import scrape_metrics

POLL_S = 1.0  # how often a busy engine is read again, s
SAY_EVERY_S = 10.0  # how often an unchanged figure is printed again, s


class EngineBusy(BenchError):
    """vLLM still held other requests after IDLE_WAIT_S: the run was not started (the message has the figure)."""


def load_now(settings: Settings) -> EngineLoad | None:
    """The requests the engines hold now (their ``/metrics``); None when none can be read or has vLLM's gauges."""
    urls = [r.url for r in replicas(settings)] if router_in_use(settings) else [engine_url(settings)]
    scrapes = [samples for samples, _ in (scrape_metrics(url, settings.vllm_headers) for url in urls) if samples]
    return engine_load(scrapes)


ROUTER_KEEPS_QUEUED = ("vllm-router passes a client's cancel on only once a request has streamed its first token, so "
                       "vLLM prefills each queued one before it drops it")
"""Measured with vllm-router 0.1.17 (docs/benchmarking.md, "A clean hand-over between runs")."""


def left_after_stop(settings: Settings, read: Callable[[], EngineLoad | None] | None = None) -> str | None:
    """After a run stopped early behind the stack's router: what the engines still hold, and why; None when no
    router is in front (vLLM aborts at once) or nothing is held or readable."""
    if not front_in_use(settings):
        return None
    load = (read or (lambda: load_now(settings)))()
    if load is None or not load.busy:
        return None
    return (f"vLLM still held {load.text()} when the run stopped: {ROUTER_KEEPS_QUEUED}; the next run waits for "
            f"them (IDLE_WAIT_S)")  # fmt: skip


def wait_until_idle(
    settings: Settings,
    read: Callable[[], EngineLoad | None] | None = None,
    out: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Return once the engine holds no request (at once when IDLE_WAIT_S is 0 or unreadable); the wait, s. Raises
    EngineBusy: still busy after IDLE_WAIT_S (:func:`core.engineload.busy_refusal`)."""
    limit_s = settings.idle_wait_s
    if limit_s <= 0:
        return 0.0
    reader = read or (lambda: load_now(settings))
    start = said = clock()
    load = reader()
    if load is None or idle_decision(load, 0.0, limit_s) == "go":
        return 0.0
    out(f"[INFO] vLLM is busy: {load.text()} not of this run (another client's, or a stopped run's not yet "
        f"aborted); waiting up to {limit_s:g} s for it to be idle (IDLE_WAIT_S)")  # fmt: skip
    shown = load
    while True:
        sleep(POLL_S)
        now = reader()
        waited_s = clock() - start
        if now is None or idle_decision(now, waited_s, limit_s) == "go":
            out(f"[INFO] vLLM is idle after {waited_s:.0f} s of waiting")
            return waited_s
        if idle_decision(now, waited_s, limit_s) == "refuse":
            raise EngineBusy(busy_refusal(now, waited_s))
        if now != shown or clock() - said >= SAY_EVERY_S:
            out(f"[INFO] vLLM still busy after {waited_s:.0f} s: {now.text()}")
            shown, said = now, clock()
