"""Background sampling of GPU memory (NVML) and vLLM's CPU-side memory, kept in a ring buffer.

NVML has no device-level peak, so the peak over a window is the maximum of the samples taken inside it.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from services.report_schema import GpuSample
from services.sidecar.gpu import GpuReader
from services.sidecar.procmem import host_mem_used_gb, process_tree_rss_gb


@dataclass(frozen=True)
class Sample:
    """One tick: per-GPU readings, vLLM tree RSS (GiB, None when unreadable) and host memory in use (GiB)."""

    t: float
    gpus: list[GpuSample] = field(default_factory=list)
    vllm_rss_gb: float | None = None
    host_used_gb: float | None = None

    @property
    def gpu_mem_used_gb(self) -> float | None:
        """Memory used summed over all GPUs (tensor parallelism spreads one model over several)."""
        return sum(g.mem_used_gb for g in self.gpus) if self.gpus else None


@dataclass(frozen=True)
class WindowPeaks:
    """Maxima over a window; None where nothing was measured."""

    samples: int
    gpu_mem_peak_gb: float | None
    vllm_rss_peak_gb: float | None
    host_used_peak_gb: float | None


def engine_pid(state_file: Path) -> int | None:
    """vLLM's pid from the launcher's state file, or None when absent or unreadable."""
    try:
        pid = json.loads(state_file.read_text()).get("pid")
    except (OSError, ValueError):
        return None
    return pid if isinstance(pid, int) else None


class Sampler:
    """Samples every ``interval_s`` on a daemon thread; ``peaks(start, end)`` summarises a window."""

    def __init__(
        self,
        gpu: GpuReader | None,
        pid_source: Callable[[], int | None],
        interval_s: float = 0.5,
        capacity: int = 100_000,
    ) -> None:
        self._gpu = gpu
        self._pid_source = pid_source
        self.interval_s = interval_s
        self._buffer: deque[Sample] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.cpu_unavailable_reason: str | None = None

    def sample_once(self) -> Sample:
        """Take one sample now and store it."""
        gpus = self._gpu.read() if self._gpu else []
        rss = None
        pid = self._pid_source()
        if pid is None:
            self.cpu_unavailable_reason = "vLLM pid unknown (no logs/engine_state.json)"
        else:
            try:
                rss = process_tree_rss_gb(pid)
                self.cpu_unavailable_reason = None
            except (psutil.NoSuchProcess, psutil.AccessDenied) as exc:
                self.cpu_unavailable_reason = f"cannot read vLLM process {pid}: {type(exc).__name__}"
        sample = Sample(t=time.time(), gpus=gpus, vllm_rss_gb=rss, host_used_gb=host_mem_used_gb())
        with self._lock:
            self._buffer.append(sample)
        return sample

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as exc:  # a sampling hiccup must not kill the thread
                self.cpu_unavailable_reason = f"sampling error: {exc}"
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        """Start the background thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the background thread."""
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)

    def window(self, start: float, end: float) -> list[Sample]:
        """Samples taken in ``[start, end]`` (Unix seconds)."""
        with self._lock:
            return [s for s in self._buffer if start <= s.t <= end]

    def latest(self) -> Sample | None:
        """The most recent sample."""
        with self._lock:
            return self._buffer[-1] if self._buffer else None

    def peaks(self, start: float, end: float) -> WindowPeaks:
        """Maxima over ``[start, end]``."""
        inside = self.window(start, end)

        def peak(values: list[float | None]) -> float | None:
            present = [v for v in values if v is not None]
            return max(present) if present else None

        return WindowPeaks(
            samples=len(inside),
            gpu_mem_peak_gb=peak([s.gpu_mem_used_gb for s in inside]),
            vllm_rss_peak_gb=peak([s.vllm_rss_gb for s in inside]),
            host_used_peak_gb=peak([s.host_used_gb for s in inside]),
        )
