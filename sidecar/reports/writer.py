"""The sidecar's I/O orchestration: gather environment, resources and log facts, compare, then write the report."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.api import BuildReportRequest, BuildReportResponse
from core.comparison import compare_with_history
from core.enginestate import read_engine_state
from core.fingerprint import unusable_reason, workload_fingerprint
from core.records import RequestRecord
from core.redact import Redactor, secret_values
from core.replicas import engine_url
from core.report_schema import HostResources, Report, Resources
from core.settings import Settings
from engine.local_control import engine_phase
from sidecar.render.pages import report_files
from sidecar.reports.builder import (
    build_report,
    host_entry,
    read_log_facts,
    replica_groups,
    run_cost,
    run_energy,
)
from sidecar.reports.envinfo import collect_environment, vllm_server_facts, with_fingerprint
from sidecar.reports.rows_link import RunRows, collect_traces, read_run_rows, trace_paths
from sidecar.reports.store import BaselineStore, ReportStore, Retention, new_id, prune, utc_now_iso
from sidecar.sampling.enginemetrics import EngineMetricsReader
from sidecar.sampling.gpu import GpuInfo, GpuReader, open_gpu_reader
from sidecar.sampling.peers import peer_resources
from sidecar.sampling.rapl import HostEnergyReader, open_host_energy_reader
from sidecar.sampling.sampler import Sampler, UnknownWindow, WindowRegistry, engine_pid

MAX_FUTURE_S = 300.0
"""How far a run's window may end after the sidecar's clock (clock skew), s; more is refused."""


class InvalidRun(ValueError):
    """A body that validates but cannot be a run: a 4xx answer (``status_code``), nothing written."""

    def __init__(self, message: str, status_code: int = 422) -> None:
        super().__init__(message)
        self.status_code = status_code


def check_run(request: BuildReportRequest, now_s: float, profile_dir: Path, runs_dir: Path) -> RunRows:
    """The run's rows (:func:`sidecar.reports.rows_link.read_run_rows`), after refusing a window ending more than
    :data:`MAX_FUTURE_S` after ``now_s`` or a missing rows file (422), a bad run id or traces (400). Raises InvalidRun:
    with the status to answer."""
    if request.window_end > now_s + MAX_FUTURE_S:
        raise InvalidRun(
            f"window_end={request.window_end} is {request.window_end - now_s:.0f} s after the sidecar's clock: a run "
            "cannot end in the future"
        )
    try:
        if request.profile_traces:
            trace_paths(request.profile_traces, profile_dir, request.run_id)
        return read_run_rows(runs_dir, request.run_id)
    except FileNotFoundError as exc:
        raise InvalidRun(str(exc)) from None
    except ValueError as exc:
        raise InvalidRun(str(exc), status_code=400) from None


@dataclass
class ReportService:
    """Holds the sampler, GPU reader, report and baseline stores; one instance per sidecar process."""

    settings: Settings
    sampler: Sampler
    gpu_reader: GpuReader | None
    gpu_reason: str | None
    store: ReportStore
    server_facts: Callable[[str], dict[str, Any]] = vllm_server_facts
    clock: Callable[[], float] = time.time
    baselines: BaselineStore = field(init=False)
    windows: WindowRegistry = field(init=False)

    def __post_init__(self) -> None:
        self._gpu_info: GpuInfo | None = self.gpu_reader.info() if self.gpu_reader else None
        self._build_lock = threading.Lock()
        self.baselines = BaselineStore(self.store.root)
        self.windows = WindowRegistry(self.window_resources, on_start=lambda: self.sampler.sample_once(True))
        self.redact = Redactor(secret_values(self.settings))
        self.retention = Retention(self.settings.reports_keep, self.settings.reports_max_age_days)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        gpu: tuple[GpuReader | None, str | None] | None = None,
        server_facts: Callable[[str], dict[str, Any]] | None = None,
        host_energy: tuple[HostEnergyReader | None, str | None] | None = None,
    ) -> ReportService:
        """Real wiring (NVML, psutil, HTTP to vLLM); tests inject ``gpu`` (reader, reason), ``server_facts`` and
        ``host_energy`` (default: this host's RAPL, read only without a GPU)."""
        reader, reason = gpu if gpu is not None else open_gpu_reader(settings.gpu_devices)
        info = reader.info() if reader else None
        if host_energy is None:
            host_energy = (None, None) if reader else open_host_energy_reader()  # the CPU build's energy
        rapl, rapl_reason = host_energy
        sampler = Sampler(
            reader,
            lambda: engine_pid(settings.engine_state_file),
            settings.gpu_sample_interval_s,
            gpu_names=info.name_by_index() if info else {},
            gpu_uuids=dict(zip(info.indices, info.uuids, strict=False)) if info else {},
            engine=EngineMetricsReader(
                lambda: engine_url(settings), settings.engine_metrics_interval_s, headers=settings.vllm_headers
            ),  # behind the stack's router: the engine serving now (its /metrics follow a blue/green switch)
            host_energy=rapl,
            host_energy_reason=rapl_reason,
            gpu_reason=reason,
        )
        store = ReportStore(settings.reports_dir, redact=Redactor(secret_values(settings)))
        headers = settings.vllm_headers
        facts = server_facts or (lambda url: vllm_server_facts(url, headers=headers))
        return cls(settings, sampler, reader, reason, store, facts)

    def current_resources(self) -> dict[str, Any]:
        """Latest sample as JSON (taken now if the sampler has none yet)."""
        sample = self.sampler.latest() or self.sampler.sample_once()
        reader = self.sampler.engine
        engine = reader.last if reader else None
        return {
            "t": sample.t,
            "gpus": [g.model_dump() for g in sample.gpus],
            "gpu_names": list(self._gpu_info.names) if self._gpu_info else [],
            "gpu_mem_used_gb": sample.gpu_mem_used_gb,
            "gpu_unavailable_reason": self.gpu_reason,
            "vllm_rss_gb": sample.vllm_rss_gb,
            "vllm_cpu_percent": sample.vllm_cpu_percent,
            "cpu_unavailable_reason": self.sampler.cpu_unavailable_reason,
            "host_mem_used_gb": sample.host_used_gb,
            "kv_cache_usage_percent": engine.kv_usage_percent if engine else None,
            "requests_running": engine.running if engine else None,
            "requests_waiting": engine.waiting if engine else None,
            "engine_metrics_unavailable_reason": reader.unavailable_reason if reader else None,
        }

    def window_resources(self, start: float, end: float) -> Resources:
        """The ``resources`` section for ``[start, end]`` (sampled now too); with PEER_SIDECARS, each host's."""
        self.sampler.sample_once(force_engine=True)
        resources = self._own_resources(start, end)
        if not self.settings.peer_sidecars:
            return resources
        token = self.settings.sidecar_auth_token()
        hosts = [host_entry(resources, self.host_name), *peer_resources(self.settings.peer_sidecars, token, start, end)]
        return resources.model_copy(update={"hosts": hosts})

    @property
    def host_name(self) -> str:
        """This host's name in reports: LOAD_HOST_NAME, else the host name."""
        return self.settings.load_host_name or socket.gethostname()

    def host_resources(self, start: float, end: float, idle_end: float | None = None) -> HostResources:
        """This host's GPU memory and energy over ``[start, end]`` (idle power before ``idle_end``, default
        ``start``): ``GET /resources/window``, what a coordinating sidecar asks its peers."""
        self.sampler.sample_once()
        return host_entry(self._own_resources(start, end, idle_end), self.host_name)

    def _own_resources(self, start: float, end: float, idle_end: float | None = None) -> Resources:
        """The ``resources`` section of this host's samples over ``[start, end]``, with why a figure is missing and
        its energy."""
        found = self.sampler.peaks(start, end)
        api = self.gpu_reader.memory_api if self.gpu_reader and found.gpu_mem_peak_gb is not None else None
        update = {
            "gpu_unavailable_reason": self.gpu_reason,
            "gpu_memory_api": api,
            "cpu_unavailable_reason": self.sampler.cpu_unavailable_reason if found.vllm_rss_peak_gb is None else None,
            "sample_interval_s": self.settings.gpu_sample_interval_s,
            "energy": self.sampler.energy(start, end, idle_end),
        }
        return found.model_copy(update=update)

    def with_run_energy(
        self, request: BuildReportRequest, records: list[RequestRecord], resources: Resources
    ) -> Resources:
        """``resources`` with the run's energy (:func:`sidecar.reports.builder.run_energy`)."""
        token = self.settings.sidecar_auth_token()
        peers = self.settings.peer_sidecars

        def ask(start: float, end: float, idle_end: float) -> list[HostResources]:
            return peer_resources(peers, token, start, end, idle_end=idle_end)

        groups = replica_groups(self.settings, self._gpu_info.indices if self._gpu_info else [])
        return run_energy(request, records, resources, self.sampler.energy, ask if peers else None, groups)

    def list_summaries(self) -> list[dict[str, Any]]:
        """Short view of every report, with its workload fingerprint and the baseline names pointing at it."""
        marks: dict[str, list[str]] = {}
        for name, report_id in self.baselines.all().items():
            marks.setdefault(report_id, []).append(name)
        return [
            {
                "report_id": r.report_id,
                "timestamp": r.timestamp,
                "model": r.environment.served_model_name,
                "fingerprint": workload_fingerprint(r.config, r.environment),
                "baselines": marks.get(r.report_id, []),
                "throughput_req_per_sec": r.metrics.throughput_req_per_sec,
                "latency_p99_ms": r.metrics.latency_p99_ms,
                "error_rate_percent": r.metrics.error_rate_percent,
            }
            for r in self.store.list()
        ]

    def mark_baseline(self, name: str, report_id: str | None = None) -> tuple[Report, str | None]:
        """Point baseline ``name`` at ``report_id`` (default: the latest); returns the report and the previous id.
        Raises ValueError: invalid name or id, or a report that cannot be a reference
        (:func:`core.fingerprint.unusable_reason`). FileNotFoundError: no such report, or no report at all."""
        if report_id is None:
            reports = self.store.list()
            if not reports:
                raise FileNotFoundError("no report yet: run `make benchmark` first")
            report = reports[-1]
        else:
            report = self.store.get(report_id)
        unusable = unusable_reason(report)  # the test every comparison applies to its reference
        if unusable:
            raise ValueError(f"{unusable}: it could never judge a later run, so it is no baseline; name another report")
        return report, self.baselines.set(name, report.report_id)

    def run_resources(self, request: BuildReportRequest) -> Resources:
        """The run's resources: its sampling window's (closed at ``window_end``), else those of its bounds."""
        if request.window_id:
            try:
                return self.windows.stop(request.window_id, request.window_end).resources
            except UnknownWindow:
                pass  # forgotten (a sidecar restart): fall back to the run's own bounds
        return self.window_resources(request.window_start, request.window_end)

    def build_and_write(self, request: BuildReportRequest) -> BuildReportResponse:
        """Build, compare and write the report for ``request`` (serialised), then apply the retention. Raises
        InvalidRun: the run cannot be reported (checked before anything is written)."""
        settings = self.settings
        rows = check_run(request, self.clock(), settings.profile_dir, settings.logs_dir / "runs")
        resources = self.with_run_energy(request, rows.records, self.run_resources(request))
        log_facts = read_log_facts(settings.vllm_log_file, request.window_start, request.window_end)
        environment = collect_environment(
            self._gpu_info,
            read_engine_state(settings.engine_state_file),
            self.server_facts(settings.vllm_url) if request.server_facts is None  # else read once, by the benchmark
            else with_fingerprint(request.server_facts, settings.vllm_url, settings.vllm_headers),
            engine_phase(settings),
        )
        with self._build_lock:
            report = build_report(
                request,
                rows.records,
                report_id=new_id("benchmark_report"),
                timestamp=utc_now_iso(),
                environment=environment,
                resources=resources,
                log_facts=log_facts,
                cost=run_cost(request.config, resources),
            )
            comparison = compare_with_history(
                report, self.store.list(), self.baselines.resolve(self.store), settings.gate_threshold_pct
            )
            report = report.model_copy(update={"comparison": comparison})
            if request.profile_traces:
                try:
                    profile = collect_traces(
                        request.profile_traces, settings.profile_dir, settings.reports_dir, request.run_id
                    )
                except ValueError as exc:
                    raise InvalidRun(str(exc), status_code=400) from None
                report = report.model_copy(update={"profile": profile})
            path = self.store.write(report, lambda final: report_files(final, rows.records), rows)
            prune(self.store, set(self.baselines.all().values()) | {path.stem}, self.retention, self.clock())
        written = self.store.get(path.stem)
        return BuildReportResponse(report_path=str(path), report=written)
