"""CSV exports next to a report, as GuideLLM and AIPerf offer them: one row per request, and a one-row summary.

``<id>.csv``: the rows of ``<id>.requests.jsonl`` with scalar columns (ITL as count, mean and max, ms).
``<id>.summary.csv``: the headline figures of the report in one row (names and units as in the JSON).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from statistics import fmean
from typing import Any

from core.records import RequestRecord
from core.report_schema import Report

ROW_COLUMNS = (
    "request_id",
    "phase",
    "started_at",
    "scheduled_at",
    "task",
    "input_bucket",
    "ok",
    "error_kind",
    "error",
    "http_status",
    "ttft_ms",
    "e2e_ms",
    "tpot_ms",
    "itl_count",
    "itl_mean_ms",
    "itl_max_ms",
    "queue_delay_ms",
    "prompt_tokens",
    "output_tokens",
    "output_tokens_source",
    "content_chunks",
    "max_tokens",
    "finish_reason",
    "end_reason",
)
SUMMARY_METRICS = (
    "requests_total",
    "requests_ok",
    "requests_failed",
    "requests_incomplete",
    "error_rate_percent",
    "duration_s",
    "throughput_req_per_sec",
    "output_tokens_per_sec",
    "total_tokens_per_sec",
    "latency_avg_ms",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "goodput_req_per_sec",
    "gpu_mem_peak_gb",
    "vllm_rss_peak_gb",
    "energy_j",
    "power_w_mean",
    "idle_power_w",
    "energy_j_per_output_token",
    "energy_j_per_request",
    "output_tokens_per_j",
    "cost_usd_per_1m_output_tokens",
    "cost_usd_per_1m_total_tokens",
    "energy_cost_usd_per_1m_output_tokens",
    "energy_cost_usd_per_1m_total_tokens",
)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(["" if v is None else v for v in row] for row in rows)
    return out.getvalue()


def _row(r: RequestRecord) -> list[Any]:
    values = r.model_dump()
    values.update(
        tpot_ms=r.tpot_ms,
        itl_count=len(r.itl_ms),
        itl_mean_ms=fmean(r.itl_ms) if r.itl_ms else None,
        itl_max_ms=max(r.itl_ms) if r.itl_ms else None,
        queue_delay_ms=r.queue_delay_ms,
    )
    return [values.get(column) for column in ROW_COLUMNS]


def rows_csv(records: Sequence[RequestRecord]) -> str:
    """One CSV row per request (warmup rows included, told apart by ``phase``)."""
    return _table(ROW_COLUMNS, [_row(r) for r in records])


def summary_csv(report: Report) -> str:
    """One CSV row: report id, time, model, the load shape and the headline metrics."""
    m = report.metrics
    header = ["report_id", "timestamp", "model", "mode", "concurrency", "rate_req_per_sec", *SUMMARY_METRICS]
    config = report.config
    row = [report.report_id, report.timestamp, config.model, config.mode, config.concurrency, config.rate_req_per_sec]
    row += [getattr(m, name) for name in SUMMARY_METRICS]
    return _table(header, [row])
