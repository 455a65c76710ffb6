"""CPU-side memory of the vLLM process tree (psutil): the figure reported where no GPU exists."""

from __future__ import annotations

import psutil

GIB = 1024**3


def process_tree_rss_gb(pid: int) -> float:
    """Resident memory of ``pid`` and all its descendants, GiB.

    Raises:
        psutil.NoSuchProcess: ``pid`` is gone.
        psutil.AccessDenied: not allowed to read it (another user or container).
    """
    root = psutil.Process(pid)
    total = root.memory_info().rss
    for child in root.children(recursive=True):
        try:
            total += child.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total / GIB


def host_mem_used_gb() -> float:
    """Memory in use on the host (total - available), GiB."""
    vm = psutil.virtual_memory()
    return (vm.total - vm.available) / GIB
