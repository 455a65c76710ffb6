"""The sidecar's HTTP contract: request and answer bodies shared by the sidecar and its clients.

The benchmark measures rows, metrics, the server cross-check and its client load; the sidecar adds resources, log
facts, environment and comparisons, and is the only writer of ``reports/``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel, Field, model_validator

from core.clientview import ClientView
from core.comparison import ABComparison
from core.report_schema import BenchmarkConfig, ErrorSummary, Report, Resources
from core.series_stats import PointPlan, SeriesReport
from core.serverview import ServerView
from core.serverview_cluster import ClusterView
from core.stats import RunMetrics

MAX_STRING_CHARS = 10_000
"""Longest text accepted anywhere in a request body (an error message, a gap line); longer is a 422."""
EARLIEST_WINDOW_S = 946_684_800.0
"""2000-01-01 UTC: a window starting earlier is a clock or a body that is wrong."""
MAX_PROBLEMS_SHOWN = 5
RUN_ID_RE = re.compile(r"[0-9]{8}_[0-9]{6}(?:_[0-9]{1,4})?")
"""A run id (``YYYYMMDD_HHMMSS``, the name of its rows file in ``logs/runs``), matched whole (``fullmatch``)."""


def body_problems(value: Any, path: str = "", duration: bool = False) -> list[str]:
    """``"metrics.ttft.p99_ms is nan"`` per non-finite number, negative duration (a ``*_ms`` / ``*_s`` number not named
    ``added_*`` or ``delta_*``) or oversized text in ``value``."""
    if isinstance(value, BaseModel):
        value = dict(value)
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, float | int):
        if isinstance(value, float) and not math.isfinite(value):
            return [f"{path or 'body'} is {value}: numbers must be finite"]
        if duration and value < 0:
            return [f"{path} is {value}: durations cannot be negative"]
        return []
    if isinstance(value, str):
        if len(value) > MAX_STRING_CHARS:
            return [f"{path or 'body'} is {len(value)} characters long: at most {MAX_STRING_CHARS}"]
        return []
    problems: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            is_duration = str(key).endswith(("_ms", "_s")) and not str(key).startswith(("added_", "delta_"))
            problems += body_problems(item, f"{path}.{key}" if path else str(key), is_duration)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            problems += body_problems(item, f"{path}[{i}]", duration)
    return problems


class ServerFacts(BaseModel):
    """vLLM's ``/version`` and first ``/v1/models`` model as the benchmark read them (None: no answer)."""

    version: str | None = None
    model_id: str | None = None
    model_root: str | None = None
    max_model_len: int | None = None


class BuildReportRequest(BaseModel):
    """Body of ``POST /reports``: a finished run by its id and the benchmark's facts (never its rows). Validated (422):
    numbers finite, durations >= 0, texts within :data:`MAX_STRING_CHARS`, window ordered, after 2000."""

    config: BenchmarkConfig
    run_id: str = Field(
        description="The run's id (``YYYYMMDD_HHMMSS``), never a path: its rows are the benchmark's file "
        "``<LOGS_DIR>/runs/<run_id>.requests.jsonl``, read by the sidecar (LOGS_DIR: the stack's shared ``logs/``)."
    )
    metrics: RunMetrics = Field(description="The run's metrics, computed by the benchmark from its rows.")
    window_start: float = Field(description="Unix time the measured window began, s.")
    window_end: float = Field(description="Unix time the measured window ended, s.")
    window_id: str | None = Field(
        default=None,
        description="The sidecar sampling window that bracketed the run (POST /windows/start); its samples give "
        "the report's resources. None: the samples between window_start and window_end.",
    )
    server_facts: ServerFacts | None = Field(
        default=None, description="vLLM's /version and /v1/models as the benchmark read them (None: the sidecar asks)."
    )
    server: ServerView | None = None
    cluster: ClusterView | None = None
    client: ClientView | None = None
    profile_traces: list[str] = Field(default_factory=list, description="Trace files vLLM wrote in the window.")
    interrupted: bool = Field(default=False, description="The run was stopped early (Ctrl-C, SIGTERM, SIGHUP).")
    gaps: list[str] = Field(default_factory=list, description="What the benchmark could not measure, and why.")
    server_down: str | None = Field(
        default=None,
        description="vLLM stopped answering mid-run and the run was ended early: when and how (None: it answered).",
    )
    engine_switch: str | None = Field(
        default=None, description="vLLM was switched mid-run (./start_vllm.sh): when, from which model to which."
    )
    errors: ErrorSummary | None = Field(
        default=None,
        description="Failed measured requests by cause, counted by the benchmark over every row (None: the sidecar "
        "counts them from the rows file).",
    )

    @model_validator(mode="before")
    @classmethod
    def _finite_and_bounded(cls, data: Any) -> Any:
        """Refuse NaN/Infinity anywhere, negative durations and oversized texts, naming where (first few)."""
        problems = body_problems(data)
        if problems:
            more = f" (and {len(problems) - MAX_PROBLEMS_SHOWN} more)" if len(problems) > MAX_PROBLEMS_SHOWN else ""
            raise ValueError("; ".join(problems[:MAX_PROBLEMS_SHOWN]) + more)
        return data

    @model_validator(mode="after")
    def _ordered_window(self) -> BuildReportRequest:
        """The measured window runs forward and starts after 2000-01-01 (Unix seconds, not milliseconds or zero)."""
        if self.window_start < EARLIEST_WINDOW_S:
            raise ValueError(f"window_start={self.window_start} is before 2000-01-01: give Unix time in seconds")
        if self.window_end < self.window_start:
            raise ValueError(
                f"window_end={self.window_end} is before window_start={self.window_start}: the window must run forward"
            )
        return self


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
    previous_id: str | None = Field(
        default=None, description="The report or series the name pointed at before (None: a new name)."
    )


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
