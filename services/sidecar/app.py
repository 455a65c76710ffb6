"""The sidecar's FastAPI app (:8200): wiring only. Samples GPU/CPU memory and is the only writer of ``reports/``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.concurrency import run_in_threadpool

from services.report_schema import BuildReportRequest, BuildReportResponse, Report
from services.settings import Settings, get_settings
from services.sidecar.reporting import ReportService


def create_app(settings: Settings | None = None, service: ReportService | None = None) -> FastAPI:
    """Build the app; ``service`` is injectable for tests (default: real NVML + psutil sampling)."""
    settings = settings or get_settings()
    svc = service or ReportService.from_settings(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        svc.sampler.start()
        yield
        svc.sampler.stop()

    app = FastAPI(title="LLM stack sidecar", version="0.1.0", lifespan=lifespan)

    @app.get("/health")
    def health() -> dict[str, Any]:
        """Liveness plus whether GPU sampling works (and why not)."""
        return {"status": "ok", "gpu": svc.gpu_reader is not None, "gpu_unavailable_reason": svc.gpu_reason}

    @app.get("/resources")
    def resources() -> dict[str, Any]:
        """The latest GPU/CPU memory sample."""
        return svc.current_resources()

    @app.get("/reports")
    def list_reports() -> list[dict[str, Any]]:
        """Every valid report, oldest first (id, time, model, headline metrics)."""
        return svc.list_summaries()

    @app.get("/reports/{report_id}", response_model=Report)
    def get_report(report_id: str) -> Report:
        """One report by id (``benchmark_report_YYYYMMDD_HHMMSS``)."""
        try:
            return svc.store.get(report_id)
        except ValueError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from exc
        except FileNotFoundError as exc:
            raise HTTPException(status_code=404, detail=f"no report {report_id}") from exc

    @app.post("/reports", response_model=BuildReportResponse)
    async def build_report(request: BuildReportRequest) -> BuildReportResponse:
        """Merge the collected rows with resources, logs and environment; write and return the report."""
        if not any(r.phase == "measured" for r in request.records):
            raise HTTPException(status_code=422, detail="no measured requests in the body: nothing to report")
        return await run_in_threadpool(svc.build_and_write, request)

    return app


def app_factory() -> FastAPI:
    """Uvicorn factory (``services.sidecar.app:app_factory``)."""
    return create_app()
