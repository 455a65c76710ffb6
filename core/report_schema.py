"""The one report schema (pydantic, versioned). The sidecar is its only writer; JSON Schema comes from here
(``sidecar.reports.schema_export``).

A report is ``reports/benchmark_report_YYYYMMDD_HHMMSS.json`` with its rows beside it (``.requests.jsonl``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field, model_validator

from core.clientview import ClientView
from core.cost import CostBasis
from core.intervals import Comparison
from core.records import Phase, RequestRecord
from core.report_resources import GpuSample, GpuStats, HostResources, KvCacheStats, ResourcePoint, Resources
from core.report_setup import BenchmarkConfig, Environment, StartupFacts
from core.serverview import ServerView
from core.serverview_cluster import ClusterView
from core.stats import RunMetrics

SCHEMA_VERSION = "1.5"
# Each version's changes: CHANGELOG.md ("Report schema 1.x"). 1.1 -> 1.2 renamed and moved fields; 1.3 and 1.4 only
# added optional fields; 1.5 has one comparison model. :func:`migrate_report` reads 1.1 to 1.4 as 1.5.
RENAMED_IN_1_2 = {"cpu_rss_peak_gb": "vllm_rss_peak_gb"}
STARTUP_RENAMED_IN_1_2 = {"last_load_s": "model_load_s", "last_engine_init_s": "engine_init_s"}
LOGS_TO_STARTUP_IN_1_2 = ("model_load_s", "engine_init_s", "kv_cache_line")
__all__ = [  # the models of the parts live in core.report_setup and core.report_resources; read them from here
    "SCHEMA_VERSION", "BenchmarkConfig", "Comparison", "Environment", "ErrorSummary", "GpuSample", "GpuStats",
    "HostResources", "KvCacheStats", "LogFacts", "Metrics", "ProfileInfo", "Report", "ResourcePoint", "Resources",
    "StartupFacts", "causes_text", "error_summary", "migrate_report",
]


class Metrics(RunMetrics):
    """The seed's flat headline names, memory peaks and the key insight, on top of the full run metrics."""

    latency_avg_ms: float | None
    latency_p50_ms: float | None
    latency_p90_ms: float | None
    latency_p99_ms: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    gpu_mem_peak_gb: float | None = Field(
        description="Max of NVML samples over the run window, GiB (used as nvidia-smi shows it); None without NVML."
    )
    vllm_rss_peak_gb: float | None = Field(description="Peak RSS of the vLLM process tree over the run window, GiB.")
    kv_cache_gb: float | None = Field(default=None, description="vLLM's KV cache pool, GiB (resources.kv_cache).")
    kv_cache_usage_peak_percent: float | None = Field(
        default=None, description="Peak of vLLM's KV cache usage over the run window, % of the pool."
    )
    kv_bound: str | None = Field(
        default=None,
        description="Why the run was bound by the KV cache (preemptions, or a full pool with requests waiting); "
        "None when it was not (or nothing was measured).",
    )
    energy_j: float | None = Field(
        default=None, description="Energy of the engine's devices over the measured window, J (resources.energy)."
    )
    power_w_mean: float | None = Field(default=None, description="energy_j / measured window, W.")
    idle_power_w: float | None = Field(default=None, description="Mean power before the run, W (shown apart).")
    energy_j_per_output_token: float | None = Field(default=None, description="energy_j / output tokens, J.")
    energy_j_per_request: float | None = Field(default=None, description="energy_j / successful requests, J.")
    output_tokens_per_j: float | None = Field(default=None, description="Output tokens / energy_j.")
    cost_usd_per_1m_output_tokens: float | None = Field(
        default=None, description="Hardware cost (PRICE_PER_HOUR) per million output tokens, USD; None: no price."
    )
    cost_usd_per_1m_total_tokens: float | None = Field(
        default=None, description="Hardware cost per million prompt + output tokens, USD."
    )
    energy_cost_usd_per_1m_output_tokens: float | None = Field(
        default=None, description="Electricity (ENERGY_PRICE_PER_KWH x energy) per million output tokens, USD."
    )
    energy_cost_usd_per_1m_total_tokens: float | None = Field(
        default=None, description="Electricity per million prompt + output tokens, USD."
    )
    key_insight: str


class LogFacts(BaseModel):
    """vLLM's log over the run window (start-up facts are in ``environment.startup``)."""

    log_file: str
    found: bool
    warnings_in_window: list[str] = Field(
        default_factory=list, description="WARNING records stamped inside the window (first line each, at most 50)."
    )
    errors_in_window: list[str] = Field(
        default_factory=list, description="ERROR and CRITICAL records stamped inside the window (at most 50)."
    )


class ErrorSummary(BaseModel):
    """Failed requests by cause, with a few example messages per cause."""

    by_kind: dict[str, int] = Field(default_factory=dict)
    examples: dict[str, list[str]] = Field(default_factory=dict)


MAX_ERROR_EXAMPLES = 5
MAX_MESSAGE_CHARS = 300


def error_summary(records: Iterable[RequestRecord], phase: Phase = "measured") -> ErrorSummary:
    """Failed requests of ``phase`` by cause, with up to five distinct messages each (``incomplete`` rows left out)."""
    summary = ErrorSummary()
    examples: dict[str, list[str]] = defaultdict(list)
    for record in records:
        if record.ok or record.phase != phase or record.error_kind == "incomplete":
            continue
        kind = record.error_kind or "unknown"
        summary.by_kind[kind] = summary.by_kind.get(kind, 0) + 1
        message = (record.error or "")[:MAX_MESSAGE_CHARS]
        if message not in examples[kind] and len(examples[kind]) < MAX_ERROR_EXAMPLES:
            examples[kind].append(message)
    summary.examples = dict(examples)
    return summary


def causes_text(summary: ErrorSummary, messages_per_cause: int = 2) -> str:
    """``http_status 2 (max_tokens=99999 cannot be ...)``, most frequent first; empty when none failed."""
    parts = []
    for kind, count in sorted(summary.by_kind.items(), key=lambda item: (-item[1], item[0])):
        shown = [m for m in summary.examples.get(kind, []) if m][:messages_per_cause]
        parts.append(f"{kind} {count}" + (f" ({' | '.join(shown)})" if shown else ""))
    return "; ".join(parts)


def migrate_report(data: Any) -> Any:
    """A stored report's JSON brought up to :data:`SCHEMA_VERSION`; other input as is."""
    if not isinstance(data, dict) or data.get("schema_version") not in ("1.1", "1.2", "1.3", "1.4"):
        return data
    data = dict(data)
    if isinstance(data.get("comparison"), dict) and "changes_pct" in data["comparison"]:
        data["fingerprint"] = data["comparison"].get("fingerprint")
        metrics = data.get("metrics")
        error_rate = metrics.get("error_rate_percent") if isinstance(metrics, dict) else None
        data["comparison"] = _comparisons_1_5(data["comparison"], error_rate)
    if data["schema_version"] == "1.1":  # 1.2 to 1.4 only added optional fields
        for section in ("metrics", "resources"):
            if isinstance(data.get(section), dict):
                data[section] = _renamed(data[section], RENAMED_IN_1_2)
        if isinstance(data.get("environment"), dict) and isinstance(data.get("logs"), dict):
            data["environment"], data["logs"] = _startup_facts_moved(data["environment"], data["logs"])
    data["schema_version"] = SCHEMA_VERSION
    return data


CHANGES_RENAMED_IN_1_5 = {
    f"{old}_pct": {"latency_p50_ms": "e2e_p50_ms", "latency_p99_ms": "e2e_p99_ms"}.get(old, old)
    for old in ("throughput_req_per_sec", "output_tokens_per_sec", "latency_p50_ms", "latency_p99_ms", "ttft_p50_ms",
                "ttft_p99_ms", "energy_j_per_output_token", "output_tokens_per_j", "cost_usd_per_1m_output_tokens",
                "cost_usd_per_1m_total_tokens", "energy_cost_usd_per_1m_output_tokens")
}  # fmt: skip
"""A 1.4 report's ``changes_pct`` keys -> the metric names of :data:`core.series_stats.SERIES_METRICS` (the rest, e.g.
``gpu_mem_peak_gb_pct``, no page showed; they are dropped)."""


def _comparisons_1_5(old: dict[str, Any], error_rate_percent: float | None) -> dict[str, Any]:
    """A 1.4 ``comparison`` as 1.5's ``vs_<name>`` -> one unlabelled point without intervals; the error rate's change in
    points becomes its two values."""
    out: dict[str, Any] = {}
    against, notes = old.get("against", {}), old.get("notes", [])
    for key, pct in old.get("changes_pct", {}).items():
        single = {"a_mean": None, "b_mean": None, "verdict": "no interval (single runs)"}
        changes = {new: {**single, "change_pct": pct[old]} for old, new in CHANGES_RENAMED_IN_1_5.items() if old in pct}
        rise = pct.get("error_rate_percent_pp")
        if rise is not None and error_rate_percent is not None:
            was = error_rate_percent - rise
            changes["error_rate_percent"] = {**single, "a_mean": was, "b_mean": error_rate_percent,
                                             "change_pct": rise / was * 100.0 if was else None}  # fmt: skip
        point = {"label": "", "against_label": "", "against_ids": [against.get(key, "?")], "changes": changes}
        mine = [n.removeprefix(f"{key}: ") for n in notes if n.startswith(f"{key}: ")]
        out[key] = {"against": against.get(key), "points": [point], "notes": mine}
    for key, reason in old.get("refused", {}).items():
        out[key] = {"refused": reason}
    return out


def _renamed(part: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    part = dict(part)
    for old, new in names.items():
        if old in part and new not in part:
            part[new] = part.pop(old)
    return part


def _startup_facts_moved(environment: dict[str, Any], logs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """1.1 -> 1.2: ``logs``' start-up facts into ``environment.startup`` (its own figures first)."""
    environment, logs = dict(environment), dict(logs)
    moved = {name: logs.pop(name, None) for name in LOGS_TO_STARTUP_IN_1_2}
    log_version = logs.pop("vllm_version", None)
    if environment.get("vllm_version") is None and log_version is not None:
        environment["vllm_version"] = log_version
    startup = environment.get("startup")
    if isinstance(startup, dict):
        startup = _renamed(startup, STARTUP_RENAMED_IN_1_2)
    elif any(value is not None for value in moved.values()):
        startup = {"phase": "unknown", "detail": "not recorded (a 1.1 report: figures from its log facts)"}
    if isinstance(startup, dict):
        for name, value in moved.items():
            if startup.get(name) is None and value is not None:
                startup[name] = value
        environment["startup"] = startup
    return environment, logs


class Report(BaseModel):
    """A benchmark baseline report."""

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        return migrate_report(data)

    schema_version: str = SCHEMA_VERSION
    report_id: str
    timestamp: str = Field(description="ISO 8601, UTC, when the report was built.")
    run_started_at: float
    run_ended_at: float
    environment: Environment
    config: BenchmarkConfig
    metrics: Metrics
    errors: ErrorSummary
    resources: Resources
    logs: LogFacts
    fingerprint: str | None = Field(default=None, description="Workload fingerprint (what makes runs comparable).")
    comparison: dict[str, Comparison] = Field(
        default_factory=dict, description="'vs_previous' / 'vs_<baseline>' -> the comparison with that reference."
    )
    server: ServerView | None = Field(
        default=None, description="vLLM's /metrics over the window and its agreement with the client (None: no scrape)."
    )
    client: ClientView | None = Field(default=None, description="The load generator's own resource use.")
    cluster: ClusterView | None = Field(
        default=None, description="Every engine behind the router over the window (None: one engine, no router)."
    )
    profile: ProfileInfo | None = Field(default=None, description="Profiler traces, when PROFILE=1.")
    cost: CostBasis | None = Field(
        default=None, description="The prices the costs were computed with (None: no price set, no cost shown)."
    )
    interrupted: bool = Field(
        default=False, description="The run was stopped early (Ctrl-C): its rows so far; never a comparison reference."
    )
    server_down: str | None = Field(
        default=None,
        description="vLLM stopped answering mid-run (connection-level failures for SERVER_DOWN_S with no success) "
        "and the run was ended early: when and how. Its rows so far are counted; never a comparison reference.",
    )
    engine_switch: str | None = Field(
        default=None,
        description="vLLM was switched during the run (./start_vllm.sh): when the new engine took over and from "
        "which model to which. Its rows hold answers of both: compared with no other run, never a reference.",
    )
    rows_omitted: str | None = Field(
        default=None,
        description="Reports of earlier versions only: why the per-request rows are not beside the report (its body "
        "would have passed SIDECAR_MAX_BODY_MB) and where they were kept; None: they are (the rows no longer travel "
        "in a body).",
    )
    gaps: list[str] = Field(
        default_factory=list,
        description="What could not be measured and why, e.g. 'server cross-check skipped: GET /metrics answered 404'.",
    )
    requests_file: str = Field(description="Per-request rows (JSONL) next to this report.")
    markdown_file: str | None = Field(default=None, description="Markdown summary next to this report.")
    html_file: str | None = Field(default=None, description="Self-contained HTML report (with plots) next to it.")
    csv_file: str | None = Field(
        default=None, description="One CSV row per request next to it (and ``<id>.summary.csv``: one summary row)."
    )


class ProfileInfo(BaseModel):
    """vLLM torch-profiler traces of the measured window (``make benchmark PROFILE=1``)."""

    dir: str = Field(description="Folder relative to reports/, e.g. profile/20261129_221901.")
    files: list[str] = Field(description="Chrome-trace files (gzip'd JSON with traceEvents).")
    open_with: str
