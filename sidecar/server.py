"""The one entrypoint of the sidecar: ``python -m sidecar.server`` (uvicorn on SIDECAR_HOST:SIDECAR_PORT).

Without SIDECAR_TOKEN it makes the token file when it is missing (as ``make up`` does), so its writes are never open;
where that file cannot be made (a read-only secret folder) every write is refused and the log says why.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import uvicorn
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, Response, params
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from core.api import (
    BaselineMarked,
    BuildReportRequest,
    BuildReportResponse,
    BuildSeriesRequest,
    BuildSeriesResponse,
    CompareRequest,
    CompareResponse,
    MarkBaseline,
    WindowResult,
    WindowStarted,
)
from core.energy import EnergyStats
from core.enginestate import read_engine_state
from core.flags import build_parser, parse
from core.knobs.commands import SIDECAR
from core.net import port_in_use_message
from core.redact import redact_json
from core.replicas import serving_engine
from core.report_schema import GpuSample, HostResources, Report
from core.series_stats import SeriesReport
from core.settings import Settings, ensure_sidecar_token, get_settings
from core.units import GIB
from engine.local_control import engine_phase, own_program
from engine.vllmlog.startup import latest_start
from sidecar.guard import RequestGuard, token_dependency
from sidecar.render.page_sections import compare_sections
from sidecar.render.pages import compare_form, write_html
from sidecar.reports.history import history_page
from sidecar.reports.rows_link import rows_file
from sidecar.reports.schema_export import write_schema_if_changed
from sidecar.reports.series import SeriesService, UnknownResult
from sidecar.reports.writer import InvalidRun, ReportService
from sidecar.sampling.resources import GpuNames, Sample, name_of
from sidecar.sampling.sampler import UnknownWindow

log = logging.getLogger(__name__)
MAX_PEER_WINDOW_S = 7 * 86400.0  # longest window summarised, s (the ring buffer holds less anyway)
LIMIT_CONCURRENCY = 256  # open connections (and tasks) at once; more get 503 from uvicorn
PREFIX = "llmstack_sidecar"


def _bytes(gb: float | None) -> float | None:
    return None if gb is None else gb * GIB


GPU_GAUGES: tuple[tuple[str, str, Callable[[GpuSample], float | None]], ...] = (
    ("gpu_memory_used_bytes", "GPU memory in use (NVML).", lambda g: g.mem_used_gb * GIB),
    ("gpu_memory_total_bytes", "GPU memory size (NVML).", lambda g: g.mem_total_gb * GIB),
    ("gpu_utilization_percent", "GPU busy time, percent (NVML).", lambda g: g.util_percent),
    ("gpu_power_watts", "GPU power draw, watts (NVML).", lambda g: g.power_w),
)
SAMPLE_GAUGES: tuple[tuple[str, str, Callable[[Sample], float | None]], ...] = (
    ("vllm_rss_bytes", "Resident memory of the vLLM process tree.", lambda s: _bytes(s.vllm_rss_gb)),
    (
        "vllm_cpu_percent",
        "CPU use of the vLLM process tree, percent of one core (summed, may exceed 100).",
        lambda s: s.vllm_cpu_percent,
    ),
    ("host_memory_used_bytes", "Host memory in use (total - available).", lambda s: _bytes(s.host_used_gb)),
    ("sample_timestamp_seconds", "Unix time of these readings.", lambda s: s.t),
)


class SampleCollector(Collector):
    """``GET /metrics``: the latest :class:`Sample` as the gauges above (``llmstack_sidecar_*``) in base units, read at
    scrape time; absent figures are left out, GPU families carry ``gpu`` (index) and ``name`` labels."""

    def __init__(self, latest: Callable[[], Sample | None], gpu_names: GpuNames = ()) -> None:
        self._latest = latest
        self._names = gpu_names

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """One family per figure."""
        sample = self._latest()
        if sample is None:
            return
        for suffix, text, value in GPU_GAUGES if sample.gpus else ():
            family = GaugeMetricFamily(f"{PREFIX}_{suffix}", text, labels=["gpu", "name"])
            for gpu in sample.gpus:
                if (reading := value(gpu)) is not None:
                    family.add_metric([str(gpu.index), name_of(self._names, gpu.index) or ""], reading)
            yield family
        for suffix, text, figure in SAMPLE_GAUGES:
            if (reading := figure(sample)) is not None:
                yield GaugeMetricFamily(f"{PREFIX}_{suffix}", text, value=reading)


@contextmanager
def answers() -> Iterator[None]:
    """The one error format: an invalid run its own status, anything unknown 404, other bad input 400."""
    try:
        yield
    except InvalidRun as exc:
        raise HTTPException(status_code=exc.status_code, detail=str(exc)) from exc
    except (UnknownResult, FileNotFoundError) as exc:
        raise HTTPException(status_code=404, detail=str(exc) or "not found") from exc
    except ValueError as exc:
        raise HTTPException(status_code=400, detail=str(exc).splitlines()[0]) from exc


def result_router(svc: ReportService, series: SeriesService, writes: Sequence[params.Depends] = ()) -> APIRouter:
    """The result endpoints, wiring only (the work is in :mod:`sidecar.reports`): reports, named baselines, series and
    A/B comparisons over ``svc`` (reports, baselines) and ``series``, with one error format (:func:`answers`);
    ``writes`` (the sidecar token check) guards every route that writes."""
    router = APIRouter()
    guarded = list(writes)

    @router.get("/reports")
    def list_reports() -> list[dict[str, Any]]:
        """Every valid report, oldest first (id, time, model, fingerprint, baselines, headline metrics)."""
        return svc.list_summaries()

    @router.get("/reports/{report_id}", response_model=Report)
    def get_report(report_id: str) -> Report:
        """One report by id (``benchmark_report_YYYYMMDD_HHMMSS``)."""
        with answers():
            return svc.store.get(report_id)

    @router.post("/reports", response_model=BuildReportResponse, dependencies=guarded)
    async def build_report(request: BuildReportRequest) -> BuildReportResponse:
        """Merge the run's rows (read from ``<LOGS_DIR>/runs/<run_id>.requests.jsonl``) with resources, logs and
        environment; compare; write the report. 422 (nothing written) for an invalid body or window or a missing
        rows file; 400 for a bad run id or profiler traces outside vLLM's profile folder."""
        with answers():
            return await run_in_threadpool(svc.build_and_write, request)

    @router.get("/baselines")
    def list_baselines() -> dict[str, str]:
        """Named baselines: name -> report or series id."""
        return svc.baselines.all()

    @router.put("/baselines/{name}", response_model=BaselineMarked, dependencies=guarded)
    def mark_baseline(name: str, body: MarkBaseline | None = None) -> BaselineMarked:
        """Mark a report (default: the latest) as baseline ``name``; later reports are compared with it."""
        with answers():
            report, previous = svc.mark_baseline(name, body.report_id if body else None)
        m = report.metrics
        return BaselineMarked(
            name=name, report_id=report.report_id, timestamp=report.timestamp, previous_id=previous,
            throughput_req_per_sec=m.throughput_req_per_sec, latency_p99_ms=m.latency_p99_ms,
        )  # fmt: skip

    @router.delete("/baselines/{name}", status_code=204, dependencies=guarded)
    def forget_baseline(name: str) -> Response:
        """Forget baseline ``name`` (its report stays)."""
        with answers():
            if not svc.baselines.remove(name):
                raise UnknownResult(f"no baseline {name!r}")
        return Response(status_code=204)

    @router.post("/series", response_model=BuildSeriesResponse, dependencies=guarded)
    async def build_series(request: BuildSeriesRequest) -> BuildSeriesResponse:
        """Build, compare and write the series report of these load points (their runs' reports must exist)."""
        with answers():
            return await run_in_threadpool(series.build, request)

    @router.get("/series")
    def list_series() -> list[dict[str, Any]]:
        """Every series, oldest first: id, time, sweep, runs per point, points and the knee line."""
        return [
            {"series_id": s.series_id, "timestamp": s.timestamp, "sweep": s.sweep, "repeat": s.repeat,
             "points": [p.label for p in s.points], "knee": s.knee.line}
            for s in series.series.list()
        ]  # fmt: skip

    @router.get("/series/{series_id}", response_model=SeriesReport)
    def get_series(series_id: str) -> SeriesReport:
        """One series report by id (``benchmark_series_YYYYMMDD_HHMMSS``)."""
        with answers():
            return series.series.get(series_id)

    @router.put("/series/{series_id}/baseline/{name}", dependencies=guarded)
    def mark_series_baseline(series_id: str, name: str) -> dict[str, str | None]:
        """Mark a series as baseline ``name`` (``previous_id``: what the name pointed at before)."""
        with answers():
            previous = series.mark_baseline(name, series_id)
        return {"name": name, "series_id": series_id, "previous_id": previous}

    @router.post("/compare", response_model=CompareResponse, dependencies=guarded)
    async def compare(request: CompareRequest) -> CompareResponse:
        """Compare B with A (report ids, series ids or baseline names) and write the comparison."""
        with answers():
            return await run_in_threadpool(series.compare, request)

    @router.get("/compare", response_class=HTMLResponse)
    async def compare_page(a: str | None = None, b: str | None = None) -> HTMLResponse:
        """With ``a`` and ``b``: the comparison page (not written to reports/); else a form to choose them."""
        if a and b:
            with answers():
                done = await run_in_threadpool(series.compare, CompareRequest(a=a, b=b), False)
            return HTMLResponse(write_html(compare_sections(done.comparison)))
        names = list(series.baselines.all())
        ids = [s.series_id for s in reversed(series.series.list())] + [r.report_id for r in reversed(svc.store.list())]
        return HTMLResponse(compare_form([*names, *ids], a))

    return router


def create_app(settings: Settings | None = None, service: ReportService | None = None) -> FastAPI:
    """The sidecar's FastAPI app (:8200), wiring only: health, readings, ``/metrics``, sampling windows, history; the
    result endpoints are :func:`result_router`, the Host/Origin/token checks :mod:`sidecar.guard`. ``service``
    is injectable for tests (default: real NVML + psutil sampling)."""
    settings = settings or get_settings()
    svc = service or ReportService.from_settings(settings)
    windows = svc.windows
    registry = CollectorRegistry(auto_describe=False)  # only the sidecar's collector
    registry.register(SampleCollector(svc.sampler.latest, svc.sampler.gpu_names))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            write_schema_if_changed(svc.store.root / "schema.json")
        except OSError as exc:  # a read-only reports/ must not stop sampling
            log.warning("cannot write %s/schema.json: %s", svc.store.root, exc)
        svc.sampler.start()
        yield
        svc.sampler.stop()

    app = FastAPI(title="LLM stack sidecar", version="0.2.0", lifespan=lifespan)
    token = settings.sidecar_auth_token()
    app.add_middleware(RequestGuard, hosts=settings.sidecar_hosts, token=token)
    writes = [Depends(token_dependency(token))]

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        """422 naming each problem (where and what), never echoing the input (a NaN is no JSON)."""
        problems = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": e.get("type")}
                    for e in exc.errors()[:20]]
        return JSONResponse(status_code=422, content={"detail": problems})

    series = SeriesService.from_settings(svc.settings, svc.store, svc.baselines)
    app.include_router(result_router(svc, series, writes))

    @app.get("/health")
    def health() -> dict[str, Any]:
        """Liveness plus whether GPU sampling works (and why not)."""
        return {"status": "ok", "gpu": svc.gpu_reader is not None, "gpu_unavailable_reason": svc.gpu_reason}

    @app.get("/auth", status_code=204, dependencies=writes)
    def auth() -> Response:
        """204 when the request carries the sidecar token (clients check it before a run); 401/403 otherwise."""
        return Response(status_code=204)

    @app.get("/startup")
    def startup() -> dict[str, Any]:
        """vLLM's start-up phase from its log with timings and every start seen; ``engine``: the engine serving now
        (supervisord program, URL, pid, served model); ``phases_s``: where its latest start spent its time
        (:mod:`engine.vllmlog.startup`)."""
        serving = serving_engine(settings)
        engine = {"program": own_program(settings), "url": serving.url, "pid": serving.pid,
                  "served_model": serving.served_name}  # fmt: skip
        phases = latest_start(settings.vllm_log_file, read_engine_state(settings.engine_state_file))
        return redact_json({**engine_phase(settings).as_dict(), "engine": engine, "phases_s": phases}, svc.redact)

    @app.get("/resources")
    def resources() -> dict[str, Any]:
        """The latest GPU/CPU sample: per-GPU memory, utilisation, power; vLLM tree RSS and CPU %."""
        return svc.current_resources()

    @app.get("/resources/window", response_model=HostResources, dependencies=writes)
    def resources_window(start: float, end: float, idle_end: float | None = None) -> HostResources:
        """This host's GPU memory and energy over ``[start, end]`` (Unix s; idle power before ``idle_end``): what a
        coordinating sidecar (PEER_SIDECARS) asks each peer. Needs the sidecar token."""
        if not (end >= start and end - start <= MAX_PEER_WINDOW_S):
            raise HTTPException(status_code=400, detail=f"need start <= end, at most {MAX_PEER_WINDOW_S:.0f} s apart")
        return svc.host_resources(start, end, idle_end)

    @app.get("/energy", response_model=EnergyStats)
    def energy(start: float, end: float) -> EnergyStats:
        """Energy of the engine's devices over ``[start, end]`` (Unix s) from the samples taken: an answer's energy."""
        if not (end >= start and end - start <= MAX_PEER_WINDOW_S):
            raise HTTPException(status_code=400, detail=f"need start <= end, at most {MAX_PEER_WINDOW_S:.0f} s apart")
        return svc.sampler.energy(start, end)

    @app.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
    def metrics() -> Response:
        """Prometheus exposition of the latest readings (GPU memory/util/power per GPU, vLLM RSS and CPU %)."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/windows/start", response_model=WindowStarted, dependencies=writes)
    def start_window(run_id: str | None = None) -> WindowStarted:
        """Open a sampling window now; with ``run_id``, first check that its rows file is in this sidecar's
        ``LOGS_DIR/runs`` (400 malformed id, 422 missing)."""
        if run_id is not None:
            try:
                rows_file(svc.settings.logs_dir / "runs", run_id)
            except ValueError as exc:
                raise HTTPException(status_code=400, detail=str(exc)) from None
            except FileNotFoundError as exc:
                raise HTTPException(status_code=422, detail=str(exc)) from None
        return windows.start()

    @app.post("/windows/{window_id}/stop", response_model=WindowResult, dependencies=writes)
    def stop_window(window_id: str) -> WindowResult:
        """Close the window and return its resource peaks, means and time series (idempotent)."""
        try:
            return windows.stop(window_id)
        except UnknownWindow as exc:
            raise HTTPException(status_code=404, detail=f"no sampling window {window_id!r}") from exc

    @app.get("/history", response_class=HTMLResponse)
    def history() -> str:
        """Each workload's runs over time (``make history``'s page, from this store): plots and tables."""
        return history_page(svc.store.list(), svc.baselines.all(), svc.settings)

    return app


def main(argv: list[str] | None = None) -> int:
    """Serve the sidecar (flags: :data:`core.knobs.commands.SIDECAR`); exit 2 when the port is taken or a flag bad."""
    _, settings = parse(build_parser("python -m sidecar.server", __doc__ or "", SIDECAR), argv)
    busy = port_in_use_message(settings.sidecar_host, settings.sidecar_port, "SIDECAR_PORT")
    if busy:
        print(f"[ERROR] {busy}", file=sys.stderr, flush=True)
        return 2
    try:
        ensure_sidecar_token(settings)
    except OSError as exc:
        print(f"[WARN] no sidecar token ({settings.sidecar_token_path}: {exc}): every write is refused", flush=True)
    uvicorn.run(
        create_app(settings),
        host=settings.sidecar_host,
        port=settings.sidecar_port,
        log_level="info",
        proxy_headers=False,  # the client address is the socket's: no X-Forwarded-For from anyone
        server_header=False,
        # Connection bounds (docs/security.md): past LIMIT_CONCURRENCY connections a request is answered 503 at
        # once; an incomplete header block holds at most h11's 16 KiB, an unread body uvicorn's 64 KiB buffer
        # (reading pauses there), so many slow clients cost at most ~LIMIT_CONCURRENCY x 80 KiB; idle keep-alive
        # connections are closed after 5 s. Bodies are bounded in size, time and number by the guard.
        limit_concurrency=LIMIT_CONCURRENCY,
        timeout_keep_alive=5,
        h11_max_incomplete_event_size=16 * 1024,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
