"""Fakes for parts that cannot run here (NVML without a GPU), checked against the real interfaces in tests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import requests


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
class FakeNvml:
    """Stands in for the ``pynvml`` module: same function names and return shapes, scripted readings."""

    names: list[str] = field(default_factory=lambda: ["NVIDIA H200"])
    total_bytes: int = 141 * 1024**3
    used_bytes: list[int] = field(default_factory=lambda: [10 * 1024**3])
    fail_init: Exception | None = None
    driver: str = "570.86.15"
    cuda: int = 12080
    reserved_bytes: int = 615 * 1024**2  # an idle H200's driver reservation
    has_v2: bool = True  # drivers before R510 lack nvmlDeviceGetMemoryInfo_v2
    nvmlMemory_v2: int = 0x02000028

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
        used = self.used_bytes[handle % len(self.used_bytes)]
        if version is None:
            used_v1 = used + self.reserved_bytes
            return _Mem(total=self.total_bytes, used=used_v1, free=self.total_bytes - used_v1)
        if not self.has_v2:
            raise RuntimeError("NVML Function Not Found")
        free = self.total_bytes - used - self.reserved_bytes
        return _Mem(total=self.total_bytes, used=used, free=free, reserved=self.reserved_bytes)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> _Util:
        return _Util(gpu=42, memory=10)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return 350_000  # milliwatts


class ScriptedRaw:
    """A ``response.raw`` that yields scripted byte chunks, like urllib3's ``stream()`` does from the network."""

    def __init__(self, chunks: list[bytes], error: Exception | None = None) -> None:
        self.chunks = chunks
        self.error = error
        self.closed = False
        self.released = False

    def stream(self, amt: Any = None, decode_content: bool = True) -> Iterator[bytes]:
        yield from self.chunks
        if self.error:
            raise self.error

    def read(self, amt: Any = None) -> bytes:
        return b""  # the chunked terminator after [DONE] carries no bytes

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        self.released = True


class ScriptedAdapter(requests.adapters.BaseAdapter):
    """An in-process transport: answers every request with a scripted status and body chunks (or raises)."""

    def __init__(
        self,
        chunks: list[bytes],
        status: int = 200,
        raise_on_send: Exception | None = None,
        error_mid_stream: Exception | None = None,
        json_routes: dict[str, tuple[int, Any]] | None = None,
    ) -> None:
        super().__init__()
        self.json_routes = json_routes or {}
        self.chunks = chunks
        self.status = status
        self.raise_on_send = raise_on_send
        self.error_mid_stream = error_mid_stream
        self.sent: list[requests.PreparedRequest] = []
        self.raws: list[ScriptedRaw] = []

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        self.sent.append(request)
        if self.raise_on_send:
            raise self.raise_on_send
        response = requests.Response()
        path = requests.utils.urlparse(request.url or "").path
        if path in self.json_routes:  # e.g. /tokenize: a plain JSON answer
            response.status_code, body = self.json_routes[path]
            response._content = json.dumps(body).encode()
            response.url, response.request = request.url or "", request
            return response
        response.status_code = self.status
        response.raw = ScriptedRaw(self.chunks, self.error_mid_stream)
        self.raws.append(response.raw)
        response.url = request.url or ""
        response.request = request
        if self.status != 200:
            response._content = b"".join(self.chunks)
        return response

    def close(self) -> None:
        pass


def scripted_session(adapter: ScriptedAdapter) -> requests.Session:
    """A session whose every http(s) request goes to ``adapter``."""
    session = requests.Session()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
