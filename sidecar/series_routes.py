"""The sidecar's series and comparison endpoints (wiring only; the work is in :mod:`sidecar.reports.series`).

``POST /series`` builds a sweep/repeat report from the runs' reports; ``GET /series``, ``GET /series/{id}``;
``PUT /series/{id}/baseline/{name}`` marks a series as a named baseline; ``POST /compare`` writes an A/B
comparison; ``GET /compare`` is a page: a form to pick A and B, or with ``?a=…&b=…`` the comparison page itself.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, HTTPException, params
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse

from core.api import BuildSeriesRequest, BuildSeriesResponse, CompareRequest, CompareResponse
from core.series import SeriesReport
from sidecar.render.html_page import STYLE
from sidecar.render.series_render import compare_html
from sidecar.reports.series import SeriesService, UnknownResult


def series_router(svc: SeriesService, writes: Sequence[params.Depends] = ()) -> APIRouter:
    """The routes above, over ``svc``; ``writes`` (the sidecar token check) guards the three that write."""
    router = APIRouter()
    guarded = list(writes)

    @router.post("/series", response_model=BuildSeriesResponse, dependencies=guarded)
    async def build_series(request: BuildSeriesRequest) -> BuildSeriesResponse:
        """Build, compare and write the series report of these load points (their runs' reports must exist)."""
        try:
            return await run_in_threadpool(svc.build, request)
        except UnknownResult as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from exc
        except ValueError as exc:
            raise HTTPException(status_code=422, detail=str(exc).splitlines()[0]) from exc

    @router.get("/series")
    def list_series() -> list[dict[str, Any]]:
        """Every series, oldest first: id, time, sweep, runs per point, points and the knee line."""
        return [
            {"series_id": s.series_id, "timestamp": s.timestamp, "sweep": s.sweep, "repeat": s.repeat,
             "points": [p.label for p in s.points], "knee": s.knee.line}
            for s in svc.series.list()
        ]

    @router.get("/series/{series_id}", response_model=SeriesReport)
    def get_series(series_id: str) -> SeriesReport:
        """One series report by id (``benchmark_series_YYYYMMDD_HHMMSS``)."""
        try:
            return svc.series.get(series_id)
        except ValueError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from exc
        except FileNotFoundError as exc:
            raise HTTPException(status_code=404, detail=f"no series {series_id}") from exc

    @router.put("/series/{series_id}/baseline/{name}", dependencies=guarded)
    def mark_series_baseline(series_id: str, name: str) -> dict[str, str | None]:
        """Mark a series as baseline ``name``: the gate then judges later series with their intervals
        (``previous_id``: what the name pointed at before, None for a new name)."""
        try:
            previous = svc.mark_baseline(name, series_id)
        except ValueError as exc:
            raise HTTPException(status_code=400, detail=str(exc).splitlines()[0]) from exc
        except UnknownResult as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from exc
        return {"name": name, "series_id": series_id, "previous_id": previous}

    @router.post("/compare", response_model=CompareResponse, dependencies=guarded)
    async def compare(request: CompareRequest) -> CompareResponse:
        """Compare B with A (report ids, series ids or baseline names) and write the comparison."""
        try:
            return await run_in_threadpool(svc.compare, request)
        except UnknownResult as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from exc

    @router.get("/compare", response_class=HTMLResponse)
    async def compare_page(a: str | None = None, b: str | None = None) -> HTMLResponse:
        """With ``a`` and ``b``: the comparison page (not written to reports/); else a form to choose them."""
        if a and b:
            try:
                done = await run_in_threadpool(svc.compare, CompareRequest(a=a, b=b), False)
            except UnknownResult as exc:
                raise HTTPException(status_code=404, detail=str(exc)) from exc
            return HTMLResponse(compare_html(done.comparison))
        return HTMLResponse(_form(svc, a))

    return router


def _form(svc: SeriesService, chosen: str | None) -> str:
    """A page with two lists (baselines, series, reports; newest first) to compare."""
    names = list(svc.baselines.all())
    ids = [s.series_id for s in reversed(svc.series.list())] + [r.report_id for r in reversed(svc.reports.list())]

    def select(field: str, selected: str | None) -> str:
        options = "".join(
            f'<option value="{html.escape(v)}"{" selected" if v == selected else ""}>{html.escape(v)}</option>'
            for v in [*names, *ids]
        )
        return f'<label>{field.upper()} <select name="{field}">{options}</select></label> '

    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Compare</title><style>{STYLE}</style>'
        "</head><body><h1>Compare two results</h1><form method=\"get\" action=\"/compare\">"
        f'{select("a", chosen)}{select("b", None)}<button type="submit">Compare B with A</button></form>'
        '<p class="muted">Baseline names, series and reports. The same comparison from a shell: '
        "<code>make compare A=… B=…</code> (also written to reports/).</p></body></html>"
    )
