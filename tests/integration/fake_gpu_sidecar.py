"""``python -m tests.integration.fake_gpu_sidecar``: the real sidecar (``sidecar.server``) on a host without a GPU,
reading a fake NVML (:class:`tests.fakes.FakeNvml`) instead: FAKE_GPU_USED_GIB (comma-separated, one GPU each, GiB
used) gives its GPUs, all "NVIDIA H200". Everything else is the real process: settings, token, HTTP, sampling."""

from __future__ import annotations

import os

import sidecar.reports.writer as writer
from sidecar.sampling.gpu import GpuReader, NvmlReader
from sidecar.server import main
from tests.fakes import FakeNvml


def fake_reader(devices: str | None = None) -> tuple[GpuReader | None, str | None]:
    """NVML of FAKE_GPU_USED_GIB's GPUs (the GPUs GPU_DEVICES picks among them)."""
    used = [float(v) for v in os.environ.get("FAKE_GPU_USED_GIB", "10,20").split(",")]
    nvml = FakeNvml(names=["NVIDIA H200"] * len(used), used_bytes=[int(u * 1024**3) for u in used])
    return NvmlReader(nvml, devices), None


if __name__ == "__main__":
    writer.open_gpu_reader = fake_reader
    raise SystemExit(main())
