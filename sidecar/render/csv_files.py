"""CSV exports next to a report: ``<id>.csv`` (one row per request, ITL as count, mean and max ms) and
``<id>.summary.csv`` (the headline figures in one row, names as in the JSON)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from statistics import fmean
from typing import Any

from core.records import RequestRecord
from core.report_schema import Report

ROW_COLUMNS = (
    "request_id", "phase", "started_at", "scheduled_at", "task", "input_bucket", "ok", "error_kind", "error",
    "http_status", "ttft_ms", "e2e_ms", "tpot_ms", "itl_count", "itl_mean_ms", "itl_max_ms", "queue_delay_ms",
    "prompt_tokens", "output_tokens", "output_tokens_source", "content_chunks", "max_tokens", "finish_reason",
    "end_reason"
)  # fmt: skip
REASONING_COLUMNS = ("reasoning_ttft_ms", "answer_ttft_ms", "reasoning_tokens", "answer_tokens",
                     "reasoning_tokens_source")
"""Columns added after ``ttft_ms``'s group when a row carried reasoning (the answer's first token beside TTFT)."""
SESSION_COLUMNS = ("session_id", "turn", "think_time_s", "cached_tokens")
"""Columns added when a row belongs to a conversation (or the server reported cached prompt tokens)."""
SUMMARY_METRICS = (
    "requests_total", "requests_ok", "requests_failed", "requests_incomplete", "error_rate_percent", "duration_s",
    "throughput_req_per_sec", "output_tokens_per_sec", "total_tokens_per_sec", "latency_avg_ms", "latency_p50_ms",
    "latency_p90_ms", "latency_p99_ms", "ttft_p50_ms", "ttft_p99_ms", "goodput_req_per_sec", "gpu_mem_peak_gb",
    "vllm_rss_peak_gb", "energy_j", "power_w_mean", "idle_power_w", "energy_j_per_output_token",
    "energy_j_per_request", "output_tokens_per_j", "cost_usd_per_1m_output_tokens", "cost_usd_per_1m_total_tokens",
    "energy_cost_usd_per_1m_output_tokens", "energy_cost_usd_per_1m_total_tokens"
)  # fmt: skip


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(["" if v is None else v for v in row] for row in rows)
    return out.getvalue()


def row_columns(records: Sequence[RequestRecord]) -> tuple[str, ...]:
    """:data:`ROW_COLUMNS`, plus :data:`REASONING_COLUMNS` / :data:`SESSION_COLUMNS` when some row has them."""
    columns: tuple[str, ...] = ROW_COLUMNS
    if any(r.reasoning_ttft_ms is not None or r.reasoning_tokens for r in records):
        at = columns.index("ttft_ms") + 1
        columns = (*columns[:at], *REASONING_COLUMNS, *columns[at:])
    if any(r.session_id is not None or r.cached_tokens is not None for r in records):
        columns = (*columns, *SESSION_COLUMNS)
    return columns


def rows_csv(records: Sequence[RequestRecord]) -> str:
    """One CSV row per request (warmup rows included, told apart by ``phase``)."""
    columns = row_columns(records)
    rows = []
    for r in records:
        values = r.model_dump() | {
            "tpot_ms": r.tpot_ms,
            "itl_count": len(r.itl_ms),
            "itl_mean_ms": fmean(r.itl_ms) if r.itl_ms else None,
            "itl_max_ms": max(r.itl_ms) if r.itl_ms else None,
            "queue_delay_ms": r.queue_delay_ms,
        }
        rows.append([values.get(column) for column in columns])
    return _table(columns, rows)


def summary_csv(report: Report) -> str:
    """One CSV row: report id, time, model, the load shape and the headline metrics."""
    m = report.metrics
    header = ["report_id", "timestamp", "model", "mode", "concurrency", "rate_req_per_sec", *SUMMARY_METRICS]
    config = report.config
    row = [report.report_id, report.timestamp, config.model, config.mode, config.concurrency, config.rate_req_per_sec]
    row += [getattr(m, name) for name in SUMMARY_METRICS]
    if m.reasoning is not None:  # reasoning streams: the answer's first token beside TTFT
        r = m.reasoning
        header += ["answer_ttft_p50_ms", "answer_ttft_p99_ms", "reasoning_ttft_p50_ms", "think_p50_ms",
                   "reasoning_tokens_mean", "answer_tokens_mean"]  # fmt: skip
        row += [r.answer_ttft.p50_ms, r.answer_ttft.p99_ms, r.reasoning_ttft.p50_ms, r.think.p50_ms,
                r.reasoning_tokens_mean, r.answer_tokens_mean]  # fmt: skip
    if m.sessions is not None:
        header += ["sessions", "session_total_p50_ms", "session_total_p99_ms", "session_cache_hit_percent"]
        row += [m.sessions.sessions, m.sessions.total.p50_ms, m.sessions.total.p99_ms, m.sessions.cache_hit_percent]
    return _table(header, [row])
