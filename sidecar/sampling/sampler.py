"""Background sampling into a ring buffer: GPUs (NVML), the host's energy counters (without a GPU), the vLLM process
tree (RSS, CPU %, psutil) and vLLM's KV/queue gauges (at most every ``ENGINE_METRICS_INTERVAL_S``); and the sampling
windows opened and closed over HTTP (``POST /windows/start``, ``POST /windows/{id}/stop``), which a client brackets
its load with to get the window's peaks back."""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from core.api import WindowResult, WindowStarted
from core.energy import EnergyStats
from core.enginestate import pid_namespace, read_engine_state
from core.report_schema import Resources
from core.units import GIB
from sidecar.sampling.enginemetrics import EngineMetricsReader
from sidecar.sampling.gpu import GpuReader
from sidecar.sampling.rapl import HostEnergyReader
from sidecar.sampling.resources import GpuNames, Sample, summarise, window_energy

NO_STATE = "vLLM pid unknown (no logs/engine_state.json)"
FOREIGN_NAMESPACE = "vLLM runs in another pid namespace (containers): its process memory is not visible to the sidecar"
UNKNOWN_NAMESPACE = (
    "vLLM's pid namespace is not recorded (logs/engine_state.json from an older launcher): its pid is not sampled"
)
WINDOW_ID_RE = re.compile(r"[0-9a-f]{16}")  # matched whole
MAX_WINDOWS = 256  # oldest windows are forgotten beyond this


@dataclass(frozen=True)
class EnginePid:
    """vLLM's process as the sidecar may sample it: ``pid``, or None and ``reason`` why it must not or cannot."""

    pid: int | None
    reason: str | None = None


def engine_pid(state_file: Path, own_namespace: str | None = None) -> EnginePid:
    """vLLM's pid from the launcher's state file, only when recorded in ``own_namespace`` (default: this process's
    pid namespace); else no pid, with the reason."""
    state = read_engine_state(state_file)
    if state is None or state.pid is None:
        return EnginePid(None, NO_STATE)
    here = own_namespace if own_namespace is not None else pid_namespace()
    if state.pid_namespace != here:
        return EnginePid(None, UNKNOWN_NAMESPACE if state.pid_namespace is None else FOREIGN_NAMESPACE)
    return EnginePid(state.pid)


def host_mem_used_gb() -> float:
    """Memory in use on the host (total - available), GiB."""
    vm = psutil.virtual_memory()
    return (vm.total - vm.available) / GIB


class ProcessTreeMeter:
    """RSS (GiB) and CPU use (% of one core, summed) of a process tree; psutil measures CPU % between two calls on one
    ``Process``, so they are kept (a new process counts 0 % at first)."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}

    def _cached(self, proc: psutil.Process) -> psutil.Process:
        known = self._procs.get(proc.pid)
        if known is None or known != proc:  # psutil equality includes the creation time: pid reuse is a new process
            self._procs[proc.pid] = known = proc
        return known

    def read(self, pid: int) -> tuple[float, float]:
        """``(rss_gb, cpu_percent)`` of ``pid``'s tree. Raises psutil.NoSuchProcess: ``pid`` is gone.
        psutil.AccessDenied: not allowed to read it."""
        root = self._cached(psutil.Process(pid))
        rss = root.memory_info().rss
        cpu = root.cpu_percent(None)
        seen = {root.pid}
        for child in root.children(recursive=True):
            try:
                proc = self._cached(child)
                rss += proc.memory_info().rss
                cpu += proc.cpu_percent(None)
                seen.add(proc.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        self._procs = {p: proc for p, proc in self._procs.items() if p in seen}
        return rss / GIB, cpu


def engine_pids(pid: int | None) -> frozenset[int] | None:
    """``pid`` and every process below it (they hold the GPU memory); None when ``pid`` is unknown or gone."""
    if pid is None:
        return None
    try:
        root = psutil.Process(pid)
        return frozenset([pid, *(child.pid for child in root.children(recursive=True))])
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


class Sampler:
    """Samples every ``interval_s`` on a daemon thread; ``peaks(start, end)`` summarises a window.

    ``pid_source`` gives vLLM's pid (or None, or an :class:`EnginePid` with the reason); ``host_energy`` reads the
    host's counters (None: ``host_energy_reason`` says why); ``clock`` stamps the samples (Unix s).
    """

    def __init__(
        self,
        gpu: GpuReader | None,
        pid_source: Callable[[], int | EnginePid | None],
        interval_s: float = 0.5,
        capacity: int = 100_000,
        gpu_names: GpuNames = (),
        engine: EngineMetricsReader | None = None,
        gpu_uuids: Mapping[int, str | None] | None = None,
        host_energy: HostEnergyReader | None = None,
        host_energy_reason: str | None = None,
        gpu_reason: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self._gpu = gpu
        self._gpu_reason = gpu_reason
        self._host_energy = host_energy
        self.host_energy_reason = host_energy_reason
        self.engine = engine
        self.gpu_names = gpu_names
        """Model name of each GPU read, by NVML index (or position)."""
        self._gpu_uuids = dict(gpu_uuids or {})
        self._meter = ProcessTreeMeter()
        self._pid_source = pid_source
        self.interval_s = interval_s
        self._buffer: deque[Sample] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.cpu_unavailable_reason: str | None = None

    def sample_once(self, force_engine: bool = False) -> Sample:
        """Take one sample now and store it (scraping vLLM's gauges when due, or when ``force_engine``)."""
        now = self._clock()
        gauges = self.engine.read(now, force=force_engine) if self.engine else None
        rss = cpu = None
        found = self._pid_source()
        pid, reason = (found.pid, found.reason) if isinstance(found, EnginePid) else (found, NO_STATE)
        gpus = self._gpu.read(engine_pids(pid)) if self._gpu else []
        if pid is None:
            self.cpu_unavailable_reason = reason or NO_STATE
        else:
            try:
                rss, cpu = self._meter.read(pid)
                self.cpu_unavailable_reason = None
            except (psutil.NoSuchProcess, psutil.AccessDenied) as exc:
                self.cpu_unavailable_reason = f"cannot read vLLM process {pid}: {type(exc).__name__}"
        host_energy = self._host_energy.read() if self._host_energy else None
        sample = Sample(
            t=now, gpus=gpus, vllm_rss_gb=rss, host_used_gb=host_mem_used_gb(), vllm_cpu_percent=cpu, engine=gauges,
            host_energy_uj=host_energy,
        )
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
        if self.engine:
            self.engine.close()

    def window(self, start: float, end: float) -> list[Sample]:
        """Samples taken in ``[start, end]`` (Unix seconds)."""
        with self._lock:
            return [s for s in self._buffer if start <= s.t <= end]

    def latest(self) -> Sample | None:
        """The most recent sample."""
        with self._lock:
            return self._buffer[-1] if self._buffer else None

    def energy(self, start: float, end: float, idle_end: float | None = None) -> EnergyStats:
        """:func:`window_energy` over ``[start, end]``, idle power before ``idle_end`` (default ``start``)."""
        return window_energy(
            self.window, start, end, idle_end if idle_end is not None else start,
            gpu_names=self.gpu_names, zones=self._host_energy.zones if self._host_energy else (),
            sample_interval_s=self.interval_s, gpu_reason=self._gpu_reason, host_reason=self.host_energy_reason,
        )  # fmt: skip

    def peaks(self, start: float, end: float) -> Resources:
        """:func:`summarise` of the samples in ``[start, end]``: peaks, means, per-GPU statistics, the time series."""
        reason = self.engine.unavailable_reason if self.engine else None
        return summarise(self.window(start, end), start, self.gpu_names, reason, self._gpu_uuids)


@dataclass
class _Window:
    started_at: float
    result: WindowResult | None = None


class UnknownWindow(KeyError):
    """No window has this id (never started, malformed, or forgotten)."""


class WindowRegistry:
    """Open windows by id; stopping one summarises it with ``summarise(start, end)`` (idempotent)."""

    def __init__(
        self,
        summarise: Callable[[float, float], Resources],
        clock: Callable[[], float] = time.time,
        on_start: Callable[[], object] | None = None,
    ) -> None:
        self._summarise = summarise
        self._on_start = on_start
        self._clock = clock
        self._windows: OrderedDict[str, _Window] = OrderedDict()
        self._lock = threading.Lock()

    def start(self) -> WindowStarted:
        """Open a window now (``on_start`` runs first: the sidecar takes a sample, so the window starts with one)."""
        window_id = secrets.token_hex(8)
        if self._on_start is not None:
            self._on_start()
        now = self._clock()
        with self._lock:
            self._windows[window_id] = _Window(started_at=now)
            while len(self._windows) > MAX_WINDOWS:
                self._windows.popitem(last=False)
        return WindowStarted(window_id=window_id, started_at=now)

    def stop(self, window_id: str, end: float | None = None) -> WindowResult:
        """Close ``window_id`` now (or at an earlier ``end``) and summarise it; a second stop returns the first result.
        Raises UnknownWindow: malformed or unknown id."""
        if not WINDOW_ID_RE.fullmatch(window_id):
            raise UnknownWindow(window_id)
        with self._lock:
            window = self._windows.get(window_id)
            if window is None:
                raise UnknownWindow(window_id)
            if window.result is not None:
                return window.result
            now = self._clock()
            start, end = window.started_at, now if end is None else max(window.started_at, min(end, now))
            window.result = WindowResult(
                window_id=window_id,
                started_at=start,
                ended_at=end,
                duration_s=end - start,
                resources=self._summarise(start, end),
            )
            return window.result
