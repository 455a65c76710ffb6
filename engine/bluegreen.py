"""The blue/green switch of ``./start_vllm.sh``: the new engine beside the running one, then the swap behind the router.

Per local replica (:func:`switch_replica`): the new engine starts in the replica's other slot (:mod:`core.slots`)
with the request; once it answers a real completion the router gains it and loses the old one (vllm-router's
``/add_worker``, ``/remove_worker``: 40 ms measured, no request refused); the slot record flips; the old engine
finishes what it was sent (:func:`drain`, at most SWITCH_DRAIN_TIMEOUT_S, the rest cut and counted) and stops. A new
engine that does not come up is stopped and the old one serves on. Whether the host holds both engines is
:func:`room_now`, what to do about it :func:`decide`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import psutil

from core.enginestate import EngineError, EngineRequest, engine_load, log_position, read_engine_state, write_request
from core.replicas import replica_url
from core.serverview_samples import parse_exposition
from core.settings import Settings
from core.slots import Slot, active_slot, other, write_slot
from core.units import GIB
from engine.enginephase import DEAD_STATES
from engine.engineplan import gpu_plan, kv_plan, model_facts, weights_bytes
from engine.gpuplan import MemoryPlan, host_gpus
from engine.kvsizing import pool_gib
from engine.local_replicas import add_worker, program_name, remove_worker
from engine.model_resolve import ResolvedModel
from engine.vllmlog.startup import latest_start, phases_line

CPU_ENGINE_OVERHEAD_BYTES = int(1.5 * GIB)
"""A CPU engine's API server and engine core beyond weights and pool (RSS 0.83 + 0.68 GiB measured)."""
DRAIN_POLL_S = 0.5
"""How often the old engine's in-flight count is read while it drains."""
SETTLED_READS = 2
"""Readings of 0 in a row that end the drain (a request sent just before the swap is counted by then)."""

How = Literal["blue-green", "restart", "refuse"]


@dataclass(frozen=True)
class Room:
    """Whether this host holds the new engine beside the running one: what it needs and what is free, bytes."""

    fits: bool
    where: str
    """``host memory`` (CPU build) or ``GPU 0`` (the tightest GPU)."""
    need_bytes: int
    free_bytes: int | None
    """None: unknown; the switch is tried side by side."""

    def describe(self) -> str:
        """``host memory: the new engine needs 3.9 GiB, 12.1 GiB available`` for the messages."""
        free = f"{self.free_bytes / GIB:.1f} GiB available" if self.free_bytes is not None else "free memory unknown"
        return f"{self.where}: the new engine needs {self.need_bytes / GIB:.1f} GiB, {free}"


def cpu_room(pool_bytes: int, weights_bytes: int, available_bytes: int) -> Room:
    """The CPU build's new engine (KV pool, weights, processes) against the host's available memory now."""
    need = pool_bytes + weights_bytes + CPU_ENGINE_OVERHEAD_BYTES
    return Room(need <= available_bytes, "host memory", need, available_bytes)


def gpu_room(plan: MemoryPlan) -> Room:
    """The GPU build's new engine: the plan's per-GPU need against each GPU's free memory (tightest named)."""
    devices = [d for d in plan.devices if d.free_bytes is not None]
    if not devices:
        return Room(True, "GPU memory", plan.need_bytes, None)
    tightest = min(devices, key=lambda d: d.free_bytes or 0)
    return Room(not plan.short_of(), f"GPU {tightest.label}", plan.need_bytes, tightest.free_bytes)


def room_now(settings: Settings, resolved: ResolvedModel, build: str) -> Room:
    """:func:`cpu_room` or :func:`gpu_room` of the engine ``settings`` would start for ``resolved`` now
    (``build``: :func:`engine.engineplan.engine_build`).

    Raises:
        KvSizingError: the pool cannot hold one request of the context length.
    """
    facts = model_facts(settings, resolved, fetch=False)
    if build == "cpu":
        pool_bytes = int(pool_gib(settings) * GIB)
        return cpu_room(pool_bytes, weights_bytes(settings, facts), psutil.virtual_memory().available)
    return gpu_room(gpu_plan(settings, facts, kv_plan(settings, resolved, facts), host_gpus()))


@dataclass(frozen=True)
class Decision:
    """How ``./start_vllm.sh`` replaces the engine and the line that says why."""

    how: How
    why: str


COMPOSE_WHY = ("the compose stack runs vLLM as one container, the `vllm` service (its GPUs reserved to it, no router "
               "inside), so a switch recreates it: stopping vLLM, then starting the new one")  # fmt: skip


def decide(mode: str, front: bool | None, room: Room | None, expected_down_s: float | None) -> Decision:
    """Blue/green or stop-and-start.

    Args:
        mode: ENGINE_SWITCH (``auto``, ``blue-green``, ``restart``).
        front: the router listens on VLLM_PORT (:func:`core.replicas.front_in_use`); None: the compose stack.
        room: :func:`cpu_room` or :func:`gpu_room` of the new engine (None with ``front`` None).
        expected_down_s: how long vLLM's last start took (None: unknown), the downtime a restart costs.

    Returns:
        ``blue-green``, ``restart`` (with the reason and expected downtime) or ``refuse`` (blue/green forced without
        the router in front).
    """
    down = (f"expect about {expected_down_s:.0f} s without an engine (its last start took that long)"
            if expected_down_s is not None else "expect a whole vLLM start without an engine")  # fmt: skip
    if front is None:
        if mode == "blue-green":
            return Decision("refuse", f"ENGINE_SWITCH=blue-green: {COMPOSE_WHY} (docs/docker.md, Switching the model)")
        return Decision("restart", f"{COMPOSE_WHY}; {down}")
    if not front:
        if mode == "blue-green":
            return Decision("refuse", "ENGINE_SWITCH=blue-green needs the router in front of the engine, and this "
                            "stack was started with ENGINE_SWITCH=restart (one engine on VLLM_PORT): `make down && "
                            "make up` without it puts the router in front")  # fmt: skip
        return Decision("restart", "this stack runs one engine on VLLM_PORT without the router in front (`make up` "
                        f"with ENGINE_SWITCH=restart): stopping it, then starting the new one; {down}")  # fmt: skip
    if mode == "restart" or room is None:
        return Decision("restart", f"ENGINE_SWITCH=restart: stopping vLLM, then starting the new one; {down}")
    if room.fits:
        return Decision("blue-green", f"{room.describe()}: starting it beside the running one")
    if mode == "blue-green":
        return Decision("blue-green", f"{room.describe()}: ENGINE_SWITCH=blue-green starts it beside the running one "
                        "anyway (it may fail to start or push the host into swap)")  # fmt: skip
    return Decision("restart", f"this host cannot hold both engines ({room.describe()}): stopping vLLM first, "
                    f"then starting the new one; {down} (ENGINE_SWITCH=blue-green forces the side-by-side "
                    "switch)")  # fmt: skip


@dataclass(frozen=True)
class Drained:
    """How the old engine's requests ended: in flight at the swap, cut at the timeout, seconds waited."""

    in_flight: int | None
    """None: the engine did not say."""
    cut: int
    waited_s: float


def in_flight(url: str, headers: dict[str, str]) -> int | None:
    """Requests the engine at ``url`` serves now (``/load``, else ``/metrics``' running + waiting gauges); None when it
    says neither."""
    try:
        load = httpx.get(f"{url}/load", timeout=5, headers=headers)
        if load.status_code == 200 and isinstance(value := load.json().get("server_load"), int):
            return value
        load_now = engine_load([parse_exposition(httpx.get(f"{url}/metrics", timeout=5, headers=headers).text)])
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return load_now.running + load_now.waiting if load_now is not None else None


def drain(count: Callable[[], int | None], timeout_s: float, sleep: Callable[[float], None] = time.sleep,
          clock: Callable[[], float] = time.monotonic) -> Drained:  # fmt: skip
    """Wait until ``count()`` (requests in flight on the old engine) reads 0 :data:`SETTLED_READS` times in a
    row, at most ``timeout_s``; what is in flight then is cut. An engine that stops answering has nothing left."""
    start = clock()
    first = count()
    last, zeros = first, 0
    while clock() - start < timeout_s:
        if last is None or last == 0:
            zeros += 1
            if zeros >= SETTLED_READS or last is None:
                return Drained(first, 0, round(clock() - start, 3))
        else:
            zeros = 0
        sleep(DRAIN_POLL_S)
        last = count()
    return Drained(first, last or 0, round(clock() - start, 3))


@dataclass(frozen=True)
class Swapped:
    """One replica's switch: its slots, the new engine's start-up and swap times, the old engine's drain."""

    index: int
    old_slot: Slot
    new_slot: Slot
    new_url: str
    started_s: float
    """From starting the new program to its first completion, s."""
    swap_s: float
    """The router's add and remove, s."""
    drained: Drained


def answers_completion(url: str, headers: dict[str, str]) -> str | None:
    """None when the engine at ``url`` answers a one-token completion, else what it did instead."""
    try:
        health = httpx.get(f"{url}/health", timeout=5, headers=headers)
        if health.status_code != 200:
            return f"/health: HTTP {health.status_code}"
        done = httpx.post(f"{url}/v1/completions", json={"prompt": "Hello", "max_tokens": 1}, timeout=120,
                          headers=headers)  # fmt: skip
    except httpx.HTTPError as exc:
        return type(exc).__name__
    return None if done.status_code == 200 else f"/v1/completions: HTTP {done.status_code} {done.text[:200]}"


class Programs:
    """What :func:`switch_replica` needs of supervisord (:class:`engine.local_control.Supervisor`)."""

    def __init__(self, supervisor: Any) -> None:
        self.supervisor = supervisor

    def state(self, name: str) -> str:
        """The program's state name (UNKNOWN when supervisord does not answer or has no such program)."""
        try:
            states = self.supervisor.states() or {}
        except EngineError:
            return "UNKNOWN"
        return str(states.get(name, {}).get("statename", "UNKNOWN"))

    def start(self, name: str) -> None:
        """Start the program without waiting for it."""
        self.supervisor.proxy().supervisor.startProcess(name, False)

    def stop(self, name: str) -> None:
        """Stop the program (its process group) if it runs."""
        if self.state(name) in ("RUNNING", "STARTING", "BACKOFF"):
            self.supervisor.proxy().supervisor.stopProcess(name)


def switch_replica(
    settings: Settings,
    index: int,
    request: EngineRequest,
    programs: Programs,
    why_not_up: Callable[[Settings, Any], str],
    say: Callable[[str], None] = print,
) -> Swapped:
    """Replace local replica ``index``'s engine by one started with ``request`` in its other slot.

    Raises:
        EngineError: the new engine did not answer (stopped; the old one serves on), or the router refused the swap
            (the new one is taken out and stopped).
    """
    old_slot = active_slot(settings.run_dir, index)
    new_slot = other(old_slot)
    old_url, new_url = replica_url(settings, index, old_slot), replica_url(settings, index, new_slot)
    old_program, new_program = program_name(index, old_slot), program_name(index, new_slot)
    new = settings.model_copy(update={"engine_replica": index, "engine_slot": new_slot})
    programs.stop(new_program)  # left running by an interrupted switch: this one starts it afresh
    write_request(new.engine_request_file, request)
    since = log_position(new.vllm_log_file)
    say(f"[INFO] Starting {new_program} on {new_url} beside {old_program} ({old_url}), which serves meanwhile; its "
        f"log: {new.vllm_log_file}")  # fmt: skip
    begun = time.monotonic()
    programs.start(new_program)
    deadline = begun + settings.startup_timeout_s
    why: str | None = "no answer yet"
    while time.monotonic() < deadline:
        state = programs.state(new_program)
        if state in DEAD_STATES:
            programs.stop(new_program)
            raise EngineError(f"{new_program} is {state}; {old_program} serves on.\n{why_not_up(new, since)}")
        if state == "RUNNING":
            why = answers_completion(new_url, settings.vllm_headers)
            if why is None:
                break
        time.sleep(1.0)
    else:
        programs.stop(new_program)
        raise EngineError(f"{new_program} did not answer a completion within {settings.startup_timeout_s:.0f} s "
                          f"({why}); stopped it, {old_program} serves on.\n{why_not_up(new, since)}")  # fmt: skip
    started_s = time.monotonic() - begun
    say(f"[INFO] {new_program} answers a completion after {started_s:.1f} s; swapping it in behind the router")
    phases = phases_line(latest_start(new.vllm_log_file, read_engine_state(new.engine_state_file)))
    if phases:
        say(f"[INFO] {new_program}: {phases.strip()}")
    swap_begun = time.monotonic()
    try:
        add_worker(settings, new_url)
        remove_worker(settings, old_url)
    except EngineError:
        try:
            add_worker(settings, old_url)  # idempotent where it was never removed
            remove_worker(settings, new_url)
        except EngineError:
            pass
        programs.stop(new_program)
        raise
    swap_s = time.monotonic() - swap_begun
    write_slot(settings.run_dir, index, new_slot)  # the UI, the sidecar and make status read the new engine now
    say(f"[INFO] The router sends new requests to {new_url} (swapped in {swap_s * 1000:.0f} ms); {old_program} "
        f"finishes what it serves (at most SWITCH_DRAIN_TIMEOUT_S={settings.switch_drain_timeout_s:g} s)")  # fmt: skip
    drained = drain(lambda: in_flight(old_url, settings.vllm_headers), settings.switch_drain_timeout_s)
    if drained.cut:
        say(f"[WARN] {old_program} still served {drained.cut} request(s) after {drained.waited_s:.0f} s "
            "(SWITCH_DRAIN_TIMEOUT_S): they are cut now")  # fmt: skip
    else:
        served = f"{drained.in_flight} request(s) in flight finished" if drained.in_flight else "nothing in flight"
        say(f"[INFO] {old_program} drained ({served}, {drained.waited_s:.1f} s); stopping it")
    programs.stop(old_program)
    return Swapped(index, old_slot, new_slot, new_url, round(started_s, 3), round(swap_s, 4), drained)
