"""The blue/green switch with REPLICAS=2 behind the real vllm-router binary, mock engines as its workers: one replica
at a time (new engine beside the old, swap, drain, stop; then the next), the router never without a worker, and a
stream of chat requests through the router that loses none. supervisord is a fake whose programs are mock servers on
each slot's port; everything else (the router's argv and worker API, the drain's ``/metrics`` reads) is real."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.enginestate import EngineError, EngineRequest
from core.replicas import record_cluster, replica_port
from core.settings import Settings
from core.slots import SLOTS, active_slot
from engine import bluegreen
from engine import local_replicas as replicas
from engine.local_control import LocalEngine
from engine.local_replicas import add_worker, program_name, router_argv, router_workers

REPLICAS = 2


def ephemeral_low() -> int:
    """The first port of the kernel's range for outgoing connections' own ports (``ip_local_port_range``)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_base(count: int) -> int:
    """The first of ``count`` consecutive loopback ports that were free a moment ago, below the range the kernel
    hands to outgoing connections: there, any client's connection beside the test (``make test`` runs the
    integration lanes beside the unit suite) may take one of them between this check and the router's bind."""
    for _ in range(50):
        base = random.randint(10000, ephemeral_low() - count - 1)
        try:
            socks = [socket.create_server(("127.0.0.1", base + k)) for k in range(count)]
        except OSError:
            continue
        for sock in socks:
            sock.close()
        return base
    raise RuntimeError("no run of free ports")


def wait_http(url: str, within_s: float = 20.0) -> None:
    """Until ``url`` answers 200."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer")
        time.sleep(0.05)


class MockSupervisor:
    """supervisord whose programs are mock engines on their slots' ports (started and stopped for real); each start
    and stop is recorded with the router's worker list right after it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.ports = {program_name(k, s): replica_port(settings, k, s) for k in range(REPLICAS) for s in SLOTS}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.steps: list[tuple[str, list[str] | None]] = []

    def spawn(self, name: str) -> None:
        port = self.ports[name]
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "loadgen.selftest.mock_server", "--port", str(port), "--metrics", "--tokens", "8",
             "--ttft-ms", "100", "--itl-ms", "40"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        wait_http(f"http://127.0.0.1:{port}/health")

    def states(self) -> dict[str, dict[str, Any]]:
        return {n: {"statename": "RUNNING" if n in self.procs else "STOPPED"} for n in self.ports}

    def proxy(self) -> Any:
        outer = self

        class Rpc:
            def startProcess(self, name: str, wait: bool = True) -> None:
                outer.spawn(name)
                outer.steps.append((f"start {name}", sorted(router_workers(outer.settings) or [])))

            def stopProcess(self, name: str) -> None:
                proc = outer.procs.pop(name)
                proc.terminate()
                proc.wait(timeout=10)
                outer.steps.append((f"stop {name}", sorted(router_workers(outer.settings) or [])))

        class Proxy:
            supervisor = Rpc()

        return Proxy()

    def close(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture
def routed(tmp_path: Path) -> Iterator[tuple[Settings, MockSupervisor]]:
    """A recorded stack of 2 local replicas in slot a (mock engines) behind vllm-router on VLLM_PORT, started with
    the stack's own argv."""
    base = free_base(2 * REPLICAS + 2)  # slots a, the router's metrics port, slots b, VLLM_PORT
    settings = Settings(_env_file=None, run_dir=tmp_path / "run", logs_dir=tmp_path / "logs",  # type: ignore[call-arg]
                        replicas=REPLICAS, replica_port_base=base, vllm_host="127.0.0.1",
                        vllm_port=base + 2 * REPLICAS + 1, startup_timeout_s=30, switch_drain_timeout_s=20)  # fmt: skip
    record_cluster(settings)
    supervisor = MockSupervisor(settings)
    router: subprocess.Popen[bytes] | None = None
    try:
        for k in range(REPLICAS):
            supervisor.spawn(program_name(k))
        router_log = tmp_path / "router.log"
        with router_log.open("wb") as log:
            router = subprocess.Popen(router_argv(settings), stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_http(f"http://127.0.0.1:{settings.vllm_port}/list_workers", within_s=60)
        except RuntimeError as exc:
            tail = router_log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{exc}; the router's exit code: {router.poll()}; its output:\n{tail}") from None
        yield settings, supervisor
    finally:
        if router is not None:
            router.terminate()
            router.wait(timeout=10)
        supervisor.close()


def test_a_switch_of_two_replicas_swaps_one_at_a_time_and_the_router_never_goes_without(
    routed: tuple[Settings, MockSupervisor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """REPLICAS=2: vllm-b starts beside vllm and replaces it behind the router, vllm stops after its drain, and only
    then does vllm-1-b start; at every step the router lists one worker per replica (never none, never a stopped
    one), and every chat request sent through it meanwhile is answered in full."""
    settings, supervisor = routed
    url = lambda name: f"http://127.0.0.1:{supervisor.ports[name]}"  # noqa: E731
    # the mock has no /v1/completions: the new engine is up when it answers /health
    monkeypatch.setattr(bluegreen, "answers_completion", lambda u, headers: wait_http(f"{u}/health"))
    answers: list[str] = []
    done = threading.Event()

    def stream() -> None:
        with httpx.Client(timeout=30) as client:
            while not done.is_set():
                body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}
                try:
                    with client.stream("POST", f"http://127.0.0.1:{settings.vllm_port}/v1/chat/completions",
                                       json=body) as response:  # fmt: skip
                        text = "".join(response.iter_text())
                    answers.append("ok" if response.status_code == 200 and "[DONE]" in text else
                                   f"HTTP {response.status_code} {text[:100]}")  # fmt: skip
                except httpx.HTTPError as exc:
                    answers.append(f"{type(exc).__name__}: {exc}")
                time.sleep(0.05)

    def answered(count: int, within_s: float = 30.0) -> None:  # by count, not by time: a busy host is slow
        deadline = time.monotonic() + within_s
        while len(answers) < count and time.monotonic() < deadline:
            time.sleep(0.05)

    sender = threading.Thread(target=stream)
    sender.start()
    try:
        answered(1)  # the stream flows before the switch begins
        engine = LocalEngine(settings, supervisor)  # type: ignore[arg-type]
        swaps = engine.switch(EngineRequest(model="synthetic:tiny"), say=lambda line: None)
        answered(max(5, len(answers) + 2))  # and after it, through the new engines
    finally:
        done.set()
        sender.join(timeout=30)
    a0, b0, a1, b1 = url("vllm"), url("vllm-b"), url("vllm-1"), url("vllm-1-b")
    assert supervisor.steps == [
        ("start vllm-b", sorted([a0, a1])),  # beside the old one, not yet a worker
        ("stop vllm", sorted([a1, b0])),  # swapped in, the old one drained and then stopped
        ("start vllm-1-b", sorted([a1, b0])),  # only now the second replica
        ("stop vllm-1", sorted([b0, b1])),
    ]
    assert [(s.index, s.old_slot, s.new_slot) for s in swaps] == [(0, "a", "b"), (1, "a", "b")]
    assert [active_slot(settings.run_dir, k) for k in range(REPLICAS)] == ["b", "b"]
    assert len(answers) >= 5 and set(answers) == {"ok"}, answers
    add_worker(settings, b0)  # listed already (the router answers 400 "already exists"): as asked, no error
    assert sorted(router_workers(settings) or []) == sorted([b0, b1])


def test_a_removal_the_router_answers_but_does_not_do_is_asked_again_and_then_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/remove_worker answered 200 while /list_workers still names the worker (seen with vllm-router 0.1.17 and
    REPLICAS=2): asked again until the list lacks it; a worker that never goes is an EngineError, so the switch
    does not stop an engine the router still sends to."""
    settings = Settings(_env_file=None, run_dir=tmp_path, vllm_port=9100)  # type: ignore[call-arg]
    asked: list[str] = []

    def post(url: str, **kw: Any) -> httpx.Response:
        asked.append(kw["params"]["url"])
        return httpx.Response(200, text="Successfully removed worker")

    monkeypatch.setattr(replicas.httpx, "post", post)
    monkeypatch.setattr(replicas.time, "sleep", lambda s: None)
    lists = iter([["http://e:1", "http://e:2"], ["http://e:2"]])
    monkeypatch.setattr(replicas, "router_workers", lambda s: next(lists))
    replicas.remove_worker(settings, "http://e:1")
    assert asked == ["http://e:1", "http://e:1"]
    monkeypatch.setattr(replicas, "router_workers", lambda s: ["http://e:1"])
    with pytest.raises(EngineError, match="still lists http://e:1 after 5 /remove_worker calls"):
        replicas.remove_worker(settings, "http://e:1")
