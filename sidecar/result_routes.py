"""The sidecar's result endpoints, wiring only (the work is in :mod:`sidecar.reports`): reports, named baselines,
series and A/B comparisons, with one error format (:func:`answers`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from fastapi import APIRouter, HTTPException, Response, params
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse

from core.api import (
    BaselineMarked,
    BuildReportRequest,
    BuildReportResponse,
    BuildSeriesRequest,
    BuildSeriesResponse,
    CompareRequest,
    CompareResponse,
    MarkBaseline,
)
from core.report_schema import Report
from core.series_stats import SeriesReport
from sidecar.render.page_sections import compare_sections
from sidecar.render.pages import compare_form, write_html
from sidecar.reports.series import SeriesService, UnknownResult
from sidecar.reports.writer import InvalidRun, ReportService


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
    """The routes above over ``svc`` (reports, baselines) and ``series``; ``writes`` (the sidecar token check)
    guards every route that writes."""
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
