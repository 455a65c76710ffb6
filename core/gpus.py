"""Which GPUs the engine uses: ``GPU_DEVICES`` (CUDA_VISIBLE_DEVICES rules) mapped to NVML's devices (pure).

Indices are PCI order (the launcher sets ``CUDA_DEVICE_ORDER=PCI_BUS_ID``); entries are indices or UUID prefixes, the
list ends at the first entry naming no (or an already listed) device, and empty hides every GPU (CUDA C Programming
Guide, "CUDA Environment Variables").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceMemory:
    """One GPU as NVML or ``nvidia-smi`` shows it: index (PCI order), UUID, model, total and free memory (bytes)."""

    index: int
    uuid: str | None
    name: str | None
    total_bytes: int
    free_bytes: int | None = None

    @property
    def label(self) -> str:
        """``1`` or ``1 (NVIDIA A10)``."""
        return f"{self.index} ({self.name})" if self.name else str(self.index)


def _match(entry: str, devices: Sequence[DeviceMemory]) -> DeviceMemory | None:
    if entry.isdigit():
        return next((d for d in devices if d.index == int(entry)), None)
    if entry.upper().startswith("GPU-"):
        hits = [d for d in devices if d.uuid and d.uuid.lower().startswith(entry.lower())]
        return hits[0] if len(hits) == 1 else None
    return None


def select_devices(spec: str | None, devices: Sequence[DeviceMemory]) -> list[DeviceMemory]:
    """The devices ``spec`` makes visible, in its order; every device when ``spec`` is None."""
    if spec is None:
        return sorted(devices, key=lambda d: d.index)
    chosen: list[DeviceMemory] = []
    for raw in spec.split(","):
        entry = raw.strip()
        device = _match(entry, devices) if entry else None
        if device is None or device in chosen:
            break
        chosen.append(device)
    return chosen
