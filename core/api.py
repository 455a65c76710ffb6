"""The sidecar's HTTP contract: request and answer bodies shared by the sidecar and its clients (the benchmark,
``make baseline``, notebooks). The load generator never imports the sidecar; both import these types.

Who computes what (one owner each): the benchmark measures the rows and computes the run's metrics
(:func:`core.stats.run_metrics`), the server cross-check and its own client load, and brackets the measured window
with a sampling window; the sidecar adds the resource peaks of that window, the log facts and the environment,
compares with earlier reports and baselines, and is the only writer of ``reports/``.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from core.abcompare import ABComparison
from core.clientview import ClientView
from core.records import RequestRecord
from core.report_schema import BenchmarkConfig, Report, Resources
from core.series import PointPlan, SeriesReport
from core.serverview import ServerView
from core.stats import RunMetrics


class BuildReportRequest(BaseModel):
    """Body of ``POST /reports``: a finished run."""

    config: BenchmarkConfig
    records: list[RequestRecord]
    metrics: RunMetrics = Field(description="The run's metrics, computed by the benchmark from ``records``.")
    window_start: float = Field(description="Unix time the measured window began, s.")
    window_end: float = Field(description="Unix time the measured window ended, s.")
    window_id: str | None = Field(
        default=None,
        description="The sidecar sampling window that bracketed the run (POST /windows/start); its samples give "
        "the report's resources. None: the samples between window_start and window_end.",
    )
    server: ServerView | None = None
    client: ClientView | None = None
    run_id: str | None = Field(default=None, description="Name of the run's rows file, YYYYMMDD_HHMMSS.")
    profile_traces: list[str] = Field(default_factory=list, description="Trace files vLLM wrote in the window.")
    interrupted: bool = Field(default=False, description="The run was stopped early (Ctrl-C).")
    gaps: list[str] = Field(default_factory=list, description="What the benchmark could not measure, and why.")


class BuildReportResponse(BaseModel):
    """Answer of ``POST /reports``."""

    report_path: str
    report: Report


class WindowStarted(BaseModel):
    """Answer of ``POST /windows/start``."""

    window_id: str
    started_at: float = Field(description="Unix time, s.")


class WindowResult(BaseModel):
    """Answer of ``POST /windows/{id}/stop``: the window's bounds and its resource peaks."""

    window_id: str
    started_at: float = Field(description="Unix time, s.")
    ended_at: float = Field(description="Unix time, s.")
    duration_s: float
    resources: Resources


class MarkBaseline(BaseModel):
    """Body of ``PUT /baselines/{name}``."""

    report_id: str | None = Field(default=None, description="Report to mark; default: the latest report.")


class BaselineMarked(BaseModel):
    """Answer of ``PUT /baselines/{name}``."""

    name: str
    report_id: str
    timestamp: str
    throughput_req_per_sec: float
    latency_p99_ms: float | None


class BuildSeriesRequest(BaseModel):
    """Body of ``POST /series``: the load points of a sweep or repeat, each with the reports of its runs."""

    config: BenchmarkConfig = Field(description="The plan every point started from.")
    points: list[PointPlan]
    sweep: str | None = None
    repeat: int = 1
    slo_attainment_pct: float = 95.0
    threshold_pct: float = Field(default=5.0, description="GATE_THRESHOLD_PCT: a regression clears it.")
    interrupted: bool = False
    notes: list[str] = Field(default_factory=list)


class BuildSeriesResponse(BaseModel):
    """Answer of ``POST /series``."""

    series_path: str
    series: SeriesReport


class CompareRequest(BaseModel):
    """Body of ``POST /compare``: two results by report id, series id or baseline name (B is judged against A)."""

    a: str
    b: str
    threshold_pct: float = 5.0


class CompareResponse(BaseModel):
    """Answer of ``POST /compare``."""

    compare_path: str
    comparison: ABComparison
