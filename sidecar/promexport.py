"""Prometheus exposition of the sidecar's latest sample (``GET /metrics``) in base units, read at scrape time; one
registry per app."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from core.units import GIB
from sidecar.sampling.resources import GpuNames, Sample, name_of

PREFIX = "llmstack_sidecar"


class SampleCollector(Collector):
    """Turns the latest :class:`Sample` into GPU and vLLM-process gauges (absent figures are left out)."""

    def __init__(self, latest: Callable[[], Sample | None], gpu_names: GpuNames = ()) -> None:
        self._latest = latest
        self._names = gpu_names

    def _name(self, index: int) -> str:
        return name_of(self._names, index) or ""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """One family per figure; GPU families carry ``gpu`` (index) and ``name`` labels."""
        sample = self._latest()
        if sample is None:
            return
        labels = ["gpu", "name"]
        used = GaugeMetricFamily(f"{PREFIX}_gpu_memory_used_bytes", "GPU memory in use (NVML).", labels=labels)
        total = GaugeMetricFamily(f"{PREFIX}_gpu_memory_total_bytes", "GPU memory size (NVML).", labels=labels)
        util = GaugeMetricFamily(f"{PREFIX}_gpu_utilization_percent", "GPU busy time, percent (NVML).", labels=labels)
        power = GaugeMetricFamily(f"{PREFIX}_gpu_power_watts", "GPU power draw, watts (NVML).", labels=labels)
        for gpu in sample.gpus:
            values = [str(gpu.index), self._name(gpu.index)]
            used.add_metric(values, gpu.mem_used_gb * GIB)
            total.add_metric(values, gpu.mem_total_gb * GIB)
            if gpu.util_percent is not None:
                util.add_metric(values, gpu.util_percent)
            if gpu.power_w is not None:
                power.add_metric(values, gpu.power_w)
        if sample.gpus:
            yield from (used, total, util, power)
        if sample.vllm_rss_gb is not None:
            yield GaugeMetricFamily(f"{PREFIX}_vllm_rss_bytes", "Resident memory of the vLLM process tree.",
                                    value=sample.vllm_rss_gb * GIB)  # fmt: skip
        if sample.vllm_cpu_percent is not None:
            yield GaugeMetricFamily(f"{PREFIX}_vllm_cpu_percent", "CPU use of the vLLM process tree, percent of one "
                                    "core (summed, may exceed 100).", value=sample.vllm_cpu_percent)  # fmt: skip
        if sample.host_used_gb is not None:
            yield GaugeMetricFamily(f"{PREFIX}_host_memory_used_bytes", "Host memory in use (total - available).",
                                    value=sample.host_used_gb * GIB)  # fmt: skip
        yield GaugeMetricFamily(f"{PREFIX}_sample_timestamp_seconds", "Unix time of these readings.", value=sample.t)


def make_registry(latest: Callable[[], Sample | None], gpu_names: GpuNames = ()) -> CollectorRegistry:
    """A registry holding only the sidecar's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SampleCollector(latest, gpu_names))
    return registry
