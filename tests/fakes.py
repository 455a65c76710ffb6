"""Fakes for parts that cannot run here (NVML without a GPU) or peers that misbehave (a server answering with the
wrong shape), checked against the real interfaces in tests."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit


@dataclass
class _Mem:
    total: int
    used: int
    free: int
    reserved: int = 0


@dataclass
class _Util:
    gpu: int
    memory: int


@dataclass
class _Proc:
    pid: int
    usedGpuMemory: int  # pynvml's field name


class NVMLError_NotSupported(Exception):  # pynvml's name, which the reader tells apart
    """What pynvml raises for a call the device does not support (its class name and message)."""

    def __init__(self) -> None:
        super().__init__("Not Supported")


@dataclass
class FakeNvml:
    """Stands in for the ``pynvml`` module: same function names and return shapes, scripted readings.

    ``energy_mj``: each GPU's total-energy counter (mJ; None: a card without it, before Volta, which answers
    NotSupported); ``power_mw``: each GPU's power reading (mW). Tests move them between samples.
    """

    names: list[str] = field(default_factory=lambda: ["NVIDIA H200"])
    total_bytes: int = 141 * 1024**3
    used_bytes: list[int] = field(default_factory=lambda: [10 * 1024**3])
    fail_init: Exception | None = None
    driver: str = "570.86.15"
    cuda: int = 12080
    reserved_bytes: int = 615 * 1024**2  # an idle H200's driver reservation
    has_v2: bool = True  # drivers before R510 lack nvmlDeviceGetMemoryInfo_v2
    nvmlMemory_v2: int = 0x02000028
    processes: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # GPU index -> (pid, bytes)
    uuids: list[str] | None = None  # per device (a host's identity of each card); default: made from the index
    totals: list[int] | None = None  # per device; default: total_bytes for every one
    energy_mj: list[int | None] = field(default_factory=lambda: [86_400_000])  # a day at 1 W since driver load
    power_mw: list[int] = field(default_factory=lambda: [350_000])
    memory_reads: int = 0  # calls of nvmlDeviceGetMemoryInfo: a test waits for the sampler's next reading

    def wait_for_reads(self, count: int, timeout_s: float = 30.0) -> None:
        """Block until ``count`` more memory readings were taken (the sampler thread's), at most ``timeout_s``."""
        target, deadline = self.memory_reads + count, time.monotonic() + timeout_s
        while self.memory_reads < target and time.monotonic() < deadline:
            time.sleep(0.02)

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        if self.uuids is not None:
            return self.uuids[handle]
        return f"GPU-{handle:08x}-fake-{self.names[handle].replace(' ', '-').lower()}"

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[_Proc]:
        return [_Proc(pid, used) for pid, used in self.processes.get(handle, [])]

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise self.fail_init

    def nvmlDeviceGetCount(self) -> int:
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self.names[handle]

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    def nvmlDeviceGetMemoryInfo(self, handle: int, version: int | None = None) -> _Mem:
        """v1 counts the driver's reservation as used; v2 (``version`` given) reports it apart, as real NVML does."""
        self.memory_reads += 1
        used = self.used_bytes[handle % len(self.used_bytes)]
        total = self.totals[handle] if self.totals is not None else self.total_bytes
        if version is None:
            used_v1 = used + self.reserved_bytes
            return _Mem(total=total, used=used_v1, free=total - used_v1)
        if not self.has_v2:
            raise RuntimeError("NVML Function Not Found")
        free = total - used - self.reserved_bytes
        return _Mem(total=total, used=used, free=free, reserved=self.reserved_bytes)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> _Util:
        return _Util(gpu=42, memory=10)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return self.power_mw[handle % len(self.power_mw)]  # milliwatts

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        value = self.energy_mj[handle % len(self.energy_mj)]
        if value is None:
            raise NVMLError_NotSupported()
        return value  # millijoules since the driver loaded


class FakeRapl:
    """A Linux powercap tree in a folder (``/sys/class/powercap`` as the kernel lays it out: every zone a top-level
    entry ``intel-rapl:N`` or ``intel-rapl:N:M`` with ``name``, ``energy_uj`` and ``max_energy_range_uj``), its
    counters set by the test; :meth:`amd_energy` adds an ``amd_energy`` hwmon device beside it."""

    def __init__(self, root: Path, zones: dict[str, tuple[str, int]]) -> None:
        """``zones``: entry name (``intel-rapl:0``) -> (zone name, max_energy_range_uj)."""
        self.powercap = root / "powercap"
        self.hwmon = root / "hwmon"
        self.hwmon.mkdir(parents=True, exist_ok=True)
        for entry, (name, max_range_uj) in zones.items():
            zone = self.powercap / entry
            zone.mkdir(parents=True)
            (zone / "name").write_text(f"{name}\n")
            (zone / "max_energy_range_uj").write_text(f"{max_range_uj}\n")
            (zone / "energy_uj").write_text("0\n")

    def set(self, entry: str, energy_uj: int) -> None:
        """Set zone ``entry``'s counter, µJ."""
        (self.powercap / entry / "energy_uj").write_text(f"{energy_uj}\n")

    def amd_energy(self, sensors: dict[int, tuple[str, int]]) -> Path:
        """An ``amd_energy`` hwmon device with ``energy<N>_label`` / ``energy<N>_input`` (µJ) per sensor."""
        device = self.hwmon / "hwmon3"
        device.mkdir()
        (device / "name").write_text("amd_energy\n")
        for number, (label, value) in sensors.items():
            (device / f"energy{number}_label").write_text(f"{label}\n")
            (device / f"energy{number}_input").write_text(f"{value}\n")
        return device


class Gate(Protocol):
    """Something to wait for (``gevent.event.Event``): in a scripted body, the blocks after it arrive once it is set."""

    def wait(self, timeout: float | None = None) -> bool: ...


class ScriptedResponse:
    """A :class:`loadgen.request.transport.Response` whose body arrives in scripted blocks (one per network read), then
    ends or raises ``error``; a :class:`Gate` among the blocks holds the rest back until it opens (the same gate in
    several streams' blocks makes their next blocks arrive together, as one step of vLLM's batch does)."""

    def __init__(self, status: int, blocks: Sequence[bytes | Gate], error: Exception | None = None) -> None:
        self.status = status
        self._blocks = blocks
        self.error = error
        self.closed_with: bool | None = None  # the reuse flag of close(); None while open

    def blocks(self) -> Iterator[bytes]:
        for block in self._blocks:
            if isinstance(block, bytes):
                yield block
            else:
                block.wait()
        if self.error:
            raise self.error

    def read_body(self, limit: int = 65536) -> bytes:
        return b"".join(self.blocks())[:limit]

    def close(self, reuse: bool) -> None:
        self.closed_with = reuse


class ScriptedTransport:
    """An in-process :class:`loadgen.request.transport.Transport`: answers every POST with a scripted status and body
    blocks, raises ``raise_on_send``, or answers a JSON route (e.g. ``/tokenize``) with ``(status, body)``."""

    def __init__(
        self,
        blocks: Sequence[bytes | Gate],
        status: int = 200,
        raise_on_send: Exception | None = None,
        error_mid_stream: Exception | None = None,
        json_routes: dict[str, tuple[int, Any]] | None = None,
    ) -> None:
        self.blocks = blocks
        self.status = status
        self.raise_on_send = raise_on_send
        self.error_mid_stream = error_mid_stream
        self.json_routes = json_routes or {}
        self.sent: list[tuple[str, bytes]] = []
        self.responses: list[ScriptedResponse] = []

    def post(
        self, url: str, body: bytes, *, timeout_s: float, on_send: Callable[[], None] | None = None
    ) -> ScriptedResponse:
        self.sent.append((url, body))
        if self.raise_on_send:
            raise self.raise_on_send
        if on_send is not None:
            on_send()
        path = urlsplit(url).path
        if path in self.json_routes:
            status, answer = self.json_routes[path]
            response = ScriptedResponse(status, [json.dumps(answer).encode()])
        else:
            response = ScriptedResponse(self.status, self.blocks, self.error_mid_stream)
        self.responses.append(response)
        return response

    def close(self) -> None:
        pass


Answer = tuple[int, str, bytes]
"""An HTTP answer of :func:`answering_server`: ``(status, content type, body)``."""


@contextmanager
def answering_server(routes: dict[str, Answer]) -> Iterator[str]:
    """A real HTTP server on a free loopback port (a thread of this process) answering ``GET`` and ``POST`` of each
    path in ``routes`` with its fixed answer and anything else with 404 — the peer that answers with the wrong shape
    (an HTML page, a list, nothing). Yields its base URL; stopped when the block ends. ``routes`` may be changed
    while it runs (the next request sees the change)."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            self.rfile.read(length)
            status, content_type, body = routes.get(self.path.partition("?")[0], (404, "application/json",
                                                                                   b'{"detail":"Not Found"}'))
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
