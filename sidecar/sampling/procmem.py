"""CPU-side figures of the vLLM process tree (psutil): RSS and CPU %, the figures reported where no GPU exists."""

from __future__ import annotations

import psutil

from core.units import GIB


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
