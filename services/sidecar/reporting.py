"""The sidecar's I/O orchestration: gather environment, resources and log facts, then write the report."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from services.report_schema import BuildReportRequest, BuildReportResponse
from services.settings import Settings
from services.sidecar.builder import build_metrics, build_report
from services.sidecar.compare import compare_with_history
from services.sidecar.envinfo import collect_environment, engine_state, vllm_server_facts
from services.sidecar.gpu import GpuInfo, GpuReader, open_gpu_reader
from services.sidecar.logfacts import read_log_facts
from services.sidecar.sampler import Sampler, engine_pid
from services.sidecar.store import ReportStore, dump_records, new_report_id, utc_now_iso


@dataclass
class ReportService:
    """Holds the sampler, GPU reader and report store; one instance per sidecar process."""

    settings: Settings
    sampler: Sampler
    gpu_reader: GpuReader | None
    gpu_reason: str | None
    store: ReportStore

    def __post_init__(self) -> None:
        self._gpu_info: GpuInfo | None = self.gpu_reader.info() if self.gpu_reader else None
        self._build_lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings, gpu: tuple[GpuReader | None, str | None] | None = None) -> ReportService:
        """Real wiring: NVML when available, psutil for the vLLM process tree."""
        reader, reason = gpu if gpu is not None else open_gpu_reader()
        sampler = Sampler(reader, lambda: engine_pid(settings.engine_state_file), settings.gpu_sample_interval_s)
        return cls(settings, sampler, reader, reason, ReportStore(settings.reports_dir))

    def current_resources(self) -> dict[str, Any]:
        """Latest sample as JSON (taken now if the sampler has none yet)."""
        sample = self.sampler.latest() or self.sampler.sample_once()
        return {
            "t": sample.t,
            "gpus": [g.model_dump() for g in sample.gpus],
            "gpu_mem_used_gb": sample.gpu_mem_used_gb,
            "gpu_unavailable_reason": self.gpu_reason,
            "vllm_rss_gb": sample.vllm_rss_gb,
            "cpu_unavailable_reason": self.sampler.cpu_unavailable_reason,
            "host_mem_used_gb": sample.host_used_gb,
        }

    def list_summaries(self) -> list[dict[str, Any]]:
        """Short view of every report."""
        return [
            {
                "report_id": r.report_id,
                "timestamp": r.timestamp,
                "model": r.environment.served_model_name,
                "throughput_req_per_sec": r.metrics.throughput_req_per_sec,
                "latency_p99_ms": r.metrics.latency_p99_ms,
                "error_rate_percent": r.metrics.error_rate_percent,
            }
            for r in self.store.list()
        ]

    def build_and_write(self, request: BuildReportRequest) -> BuildReportResponse:
        """Build the report for ``request`` and write it (serialised, so comparisons see earlier reports)."""
        settings = self.settings
        self.sampler.sample_once()  # the window's end is covered even for runs shorter than one interval
        peaks = self.sampler.peaks(request.window_start, request.window_end)
        log_facts = read_log_facts(settings.vllm_log_file, request.window_start, request.window_end)
        environment = collect_environment(
            self._gpu_info,
            engine_state(settings.engine_state_file),
            vllm_server_facts(settings.vllm_url),
            log_facts.vllm_version,
        )
        metrics = build_metrics(request.records, peaks, request.config.slo)
        with self._build_lock:
            comparison = compare_with_history(request.config, environment, metrics, self.store.list())
            report = build_report(
                request,
                report_id=new_report_id(),
                timestamp=utc_now_iso(),
                environment=environment,
                metrics=metrics,
                peaks=peaks,
                gpu_unavailable_reason=self.gpu_reason,
                cpu_unavailable_reason=self.sampler.cpu_unavailable_reason,
                log_facts=log_facts,
                comparison=comparison,
            )
            path = self.store.write(report, dump_records(request.records))
        written = self.store.get(path.stem)
        return BuildReportResponse(report_path=str(path), report=written)
