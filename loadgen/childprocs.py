"""Child processes for measuring the load generator: the mock server, a process tree's CPU, clean stops."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil

from core.logfiles import log_tail
from core.net import free_port, wait_for_http
from core.settings import PROJECT_ROOT

SAMPLE_INTERVAL_S = 0.1
MOCK_START_TIMEOUT_S = 60.0


class ProcessError(RuntimeError):
    """A helper process could not be started; the message says why and where its log is."""


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds used so far by a process tree, at a wall-clock and a monotonic time (seconds)."""

    wall_s: float
    monotonic_s: float
    cpu_s: float


def cpu_in_window(samples: Sequence[CpuSample], start_s: float, end_s: float, *, monotonic: bool = False) -> float:
    """CPU seconds a process tree used between ``start_s`` and ``end_s`` (wall clock, or monotonic clock), the CPU
    seconds at each linearly interpolated between samples (clamped to the first/last sample). Raises ValueError: no
    samples."""
    if not samples:
        raise ValueError("no CPU samples")
    times = [s.monotonic_s if monotonic else s.wall_s for s in samples]
    start_cpu, end_cpu = np.interp([start_s, end_s], times, [s.cpu_s for s in samples])
    return max(0.0, float(end_cpu - start_cpu))


def tree_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) used so far by a process and its live children; None once it is gone."""
    try:
        proc = psutil.Process(pid)
        times = proc.cpu_times()
        total = times.user + times.system + times.children_user + times.children_system
        for child in proc.children(recursive=True):
            try:
                child_times = child.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            total += child_times.user + child_times.system
        return total
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


class CpuSampler:
    """Samples a process tree's CPU seconds every ``interval_s`` in a background thread (``with`` block)."""

    def __init__(self, pid: int, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.samples: list[CpuSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"cpu-sampler-{pid}", daemon=True)

    def _loop(self) -> None:
        while True:
            cpu = tree_cpu_s(self.pid)
            if cpu is None:
                return
            self.samples.append(CpuSample(time.time(), time.monotonic(), cpu))
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a child we started and its descendants (SIGTERM, then SIGKILL after 5 s)."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    for child in children:
        with suppress(psutil.NoSuchProcess):
            child.kill()


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Have Linux send this process ``sig`` when its parent dies (``PR_SET_PDEATHSIG``); False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def lifetime_bound(parent_pid: int) -> Callable[[], None]:
    """The ``preexec_fn`` binding a child to ``parent_pid`` (:func:`die_with_parent`; exits if it is already gone)."""

    def bind() -> None:
        die_with_parent()
        if os.getppid() != parent_pid:  # pragma: no cover - a race with the parent's death
            os._exit(1)

    return bind


def kill_group(pgid: int) -> None:
    """SIGKILL every process of process group ``pgid`` (none left: nothing)."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


@dataclass(frozen=True)
class MockHandle:
    """A running mock server: its base URL (no ``/v1``) and pid."""

    url: str
    pid: int


@contextmanager
def mock_server(
    log_path: Path,
    *,
    tokens: int,
    ttft_ms: float,
    itl_ms: float,
    tokens_per_chunk: int = 1,
    events_per_write: int = 0,
    processes: int = 1,
    require_api_key: bool = False,
) -> Iterator[MockHandle]:
    """Run ``python -m loadgen.selftest.mock_server`` on a free port for the block (the pid: its processes' parent).
    Raises ProcessError: it did not answer ``/health`` within a minute."""
    port = free_port()
    argv = [
        sys.executable, "-m", "loadgen.selftest.mock_server", "--port", str(port), "--tokens", str(tokens),
        "--ttft-ms", f"{ttft_ms:g}", "--itl-ms", f"{itl_ms:g}", "--tokens-per-chunk", str(tokens_per_chunk),
        "--events-per-write", str(events_per_write), "--processes", str(processes),
    ]  # fmt: skip
    if require_api_key:
        argv.append("--require-api-key")
    url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT)

    def exited() -> str | None:
        code = proc.poll()
        return None if code is None else f"the mock server exited with {code}:\n{log_tail(log_path)}"

    try:
        if not wait_for_http(f"{url}/health", MOCK_START_TIMEOUT_S, interval_s=0.2, abort=exited)[0]:
            raise ProcessError(exited() or f"the mock server did not start within {MOCK_START_TIMEOUT_S:.0f} s")
        yield MockHandle(url, proc.pid)
    finally:
        stop_process(proc)
