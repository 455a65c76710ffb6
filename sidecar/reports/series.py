"""The sidecar's series (per point means and 95 % intervals, the SLO knee, comparisons with the previous series and
every baseline) and A/B comparisons of two references (report id, series id or baseline name)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from core.api import BuildSeriesRequest, BuildSeriesResponse, CompareRequest, CompareResponse
from core.comparison import ABComparison, Side, compare_points, compare_sides, environment_notes, prefix_cache_notes
from core.intervals import Comparison
from core.redact import Redactor, secret_values
from core.report_schema import Environment
from core.series_stats import (
    COMPARE_ID_RE,
    SERIES_ID_RE,
    SeriesPoint,
    SeriesReport,
    find_knee,
    is_series_id,
    measure_point,
    prefix_cache_spread_notes,
    report_as_point,
    series_unusable_reason,
)
from core.settings import Settings
from sidecar.render.pages import compare_files, series_files
from sidecar.reports.store import BaselineStore, ReportStore, ResultStore, new_id, utc_now_iso

IDS_HINT = "`make history` lists the ids (over HTTP: GET /reports, GET /series)"


class UnknownResult(LookupError):
    """A reference names no report, series or baseline; the message lists what exists."""


@dataclass
class SeriesService:
    """Series and comparisons over the report store; one instance per sidecar process."""

    reports: ReportStore
    baselines: BaselineStore
    series: ResultStore[SeriesReport]
    comparisons: ResultStore[ABComparison]
    sidecar_url: str | None = None  # linked from the HTML pages (the on-demand compare page)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_settings(cls, settings: Settings, reports: ReportStore, baselines: BaselineStore) -> SeriesService:
        """Stores beside the reports, with the same redaction of secrets."""
        redact = Redactor(secret_values(settings))
        root = settings.reports_dir
        return cls(
            reports,
            baselines,
            ResultStore(root, SeriesReport, "benchmark_series", "series_id", SERIES_ID_RE, redact),
            ResultStore(root, ABComparison, "benchmark_compare", "compare_id", COMPARE_ID_RE, redact),
            settings.sidecar_url,
        )

    def _comparisons(
        self, points: list[SeriesPoint], environment: Environment, threshold_pct: float
    ) -> dict[str, Comparison]:
        """Against the latest earlier series sharing a point and every named baseline, noting environment changes."""
        out: dict[str, Comparison] = {}
        fingerprints = {p.fingerprint for p in points}
        for earlier in reversed(self.series.list()):
            if fingerprints & {p.fingerprint for p in earlier.points}:
                comparison = compare_points(points, earlier.points, earlier.series_id, threshold_pct)
                comparison.notes = environment_notes(earlier.environment, environment) + prefix_cache_notes(comparison)
                out["vs_previous"] = comparison
                break
        for name, result_id in self.baselines.all().items():
            try:
                reference = self.side(result_id)
                comparison = compare_points(points, reference.points, result_id, threshold_pct)
                comparison.notes = [*environment_notes(reference.environment, environment),
                                    *prefix_cache_notes(comparison)]
            except (UnknownResult, OSError) as exc:
                comparison = Comparison(against=result_id, refused=f"cannot be read: {exc}")
            out[f"vs_{name}"] = comparison
        return out

    def build(self, request: BuildSeriesRequest) -> BuildSeriesResponse:
        """Measure the points from their reports, find the knee, compare and write the series. Raises
        FileNotFoundError: a point names a report that does not exist. ValueError: a bad id or no point."""
        slo = request.config.slo
        points = [
            measure_point(plan, [self.reports.get(i) for i in plan.report_ids], slo,
                          request.slo_attainment_pct)
            for plan in request.points
            if plan.report_ids
        ]
        if not points:
            raise ValueError("the series names no report: nothing to build")
        first = self.reports.get(points[0].report_ids[0])
        with self._lock:
            series = SeriesReport(
                series_id=new_id("benchmark_series"),
                timestamp=utc_now_iso(),
                sweep=request.sweep,
                repeat=request.repeat,
                config=request.config.model_copy(update={"vllm_url": first.config.vllm_url}),
                environment=first.environment,
                slo=slo,
                slo_attainment_pct=request.slo_attainment_pct,
                points=points,
                knee=find_knee(points, slo, request.slo_attainment_pct),
                comparison=self._comparisons(points, first.environment, request.threshold_pct),
                interrupted=request.interrupted,
                notes=request.notes + prefix_cache_spread_notes(points),
            )
            path = self.series.write(series, lambda final: series_files(final, self.sidecar_url))
        return BuildSeriesResponse(series_path=str(path), series=self.series.get(path.stem))

    def side(self, ref: str) -> Side:
        """A reference as one side of a comparison: a baseline name, a series id or a report id. Raises UnknownResult:
        it names nothing known (the message says what exists)."""
        result_id = self.baselines.all().get(ref, ref)
        try:
            if is_series_id(result_id):
                series = self.series.get(result_id)
                return Side(ref=ref, kind="series", id=result_id, environment=series.environment,
                            config=series.config, points=series.points, knee=series.knee, repeat=series.repeat)
            report = self.reports.get(result_id)
        except FileNotFoundError:
            what = "series" if is_series_id(result_id) else "report"
            raise UnknownResult(f"no {what} {result_id}; " + IDS_HINT) from None
        except ValueError:
            known = ", ".join(sorted(self.baselines.all())) or "none"
            raise UnknownResult(
                f"{ref!r} is no report id (benchmark_report_…), series id (benchmark_series_…) or baseline name "
                f"(baselines: {known}); " + IDS_HINT
            ) from None
        return Side(ref=ref, kind="report", id=result_id, environment=report.environment, config=report.config,
                    points=[report_as_point(report)])

    def compare(self, request: CompareRequest, write: bool = True) -> CompareResponse:
        """B against A (see :mod:`core.comparison`); written to ``reports/`` unless ``write`` is False. Raises
        UnknownResult: a reference names nothing known."""
        comparison = compare_sides(
            self.side(request.a), self.side(request.b), new_id("benchmark_compare"), utc_now_iso(),
            request.threshold_pct,
        )
        if not write:
            return CompareResponse(compare_path="", comparison=comparison)
        with self._lock:
            path = self.comparisons.write(comparison, compare_files)
        return CompareResponse(compare_path=str(path), comparison=self.comparisons.get(path.stem))

    def mark_baseline(self, name: str, series_id: str) -> str | None:
        """Point baseline ``name`` at series ``series_id``; returns the id the name pointed at before (None: new).
        Raises ValueError: a bad name or id, or an unusable series. FileNotFoundError: no such series."""
        unusable = series_unusable_reason(self.series.get(series_id))
        if unusable:
            raise ValueError(f"{unusable}: it could never judge a later series, so it is no baseline; name another")
        return self.baselines.set(name, series_id)
