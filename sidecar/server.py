"""The one entrypoint of the sidecar: ``python -m sidecar.server`` (uvicorn on SIDECAR_HOST:SIDECAR_PORT).

Without SIDECAR_TOKEN it makes the token file when it is missing (as ``make up`` does), so its writes are never open;
where that file cannot be made (a read-only secret folder) every write is refused and the log says why.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from core.api import WindowResult, WindowStarted
from core.energy import EnergyStats
from core.enginestate import read_engine_state
from core.flags import build_parser, parse
from core.knobs.commands import SIDECAR
from core.net import port_in_use_message
from core.redact import redact_json
from core.replicas import serving_engine
from core.report_schema import GpuSample, HostResources
from core.settings import Settings, ensure_sidecar_token, get_settings
from core.units import GIB
from engine.local_control import engine_phase, own_program
from engine.vllmlog.startup import latest_start
from sidecar.guard import RequestGuard, token_dependency
from sidecar.reports.history import history_page
from sidecar.reports.rows_link import rows_file
from sidecar.reports.schema_export import write_schema_if_changed
from sidecar.reports.series import SeriesService
from sidecar.reports.writer import ReportService
from sidecar.result_routes import result_router
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


def create_app(settings: Settings | None = None, service: ReportService | None = None) -> FastAPI:
    """The sidecar's FastAPI app (:8200), wiring only: health, readings, ``/metrics``, sampling windows, history; the
    result endpoints are :mod:`sidecar.result_routes`, the Host/Origin/token checks :mod:`sidecar.guard`. ``service``
    is injectable for tests (default: real NVML + psutil sampling)."""
    settings = settings or get_settings()
    svc = service or ReportService.from_settings(settings)
    windows = svc.windows
    registry = CollectorRegistry(auto_describe=False)  # only the sidecar's collector
    registry.register(SampleCollector(svc.sampler.latest, svc.gpu_names_by_index))

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
