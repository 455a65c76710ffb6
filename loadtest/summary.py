"""Terminal summary of a report (pure): the ``[RESULT]`` and ``[REPORT]`` lines ``make benchmark`` prints."""

from __future__ import annotations

from services.report_schema import Report


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}ms"


def memory_text(report: Report) -> str:
    """``GPU mem peak 1.23 GB`` where NVML exists, else the vLLM process tree's peak RSS."""
    m = report.metrics
    if m.gpu_mem_peak_gb is not None:
        return f"GPU mem peak {m.gpu_mem_peak_gb:.2f} GB"
    if m.cpu_rss_peak_gb is not None:
        return f"vLLM RSS peak {m.cpu_rss_peak_gb:.2f} GB (no GPU: {report.resources.gpu_unavailable_reason})"
    return "memory n/a"


def format_summary(report: Report, report_path: str) -> list[str]:
    """Lines for the terminal, in the seed's format."""
    m = report.metrics
    lines = [
        f"[RESULT] Requests: {m.requests_ok}/{m.requests_total} ok | errors {m.error_rate_percent:.1f}%"
        + (f" {report.errors.by_kind}" if report.errors.by_kind else ""),
        f"[RESULT] Avg latency {_ms(m.latency_avg_ms)} | P50 {_ms(m.latency_p50_ms)} | P90 {_ms(m.latency_p90_ms)}"
        f" | P99 {_ms(m.latency_p99_ms)} | TTFT P50 {_ms(m.ttft_p50_ms)} P99 {_ms(m.ttft_p99_ms)}",
        f"[RESULT] Throughput: {m.throughput_req_per_sec:.2f} req/s | {m.output_tokens_per_sec:.1f} output tok/s"
        f" | {memory_text(report)}",
    ]
    if report.environment.synthetic:
        lines.append(f"[WARN] Synthetic model served ({report.environment.synthetic_reason})")
    for name, changes in report.comparison.changes_pct.items():
        parts = []
        for key, label in (("throughput_req_per_sec_pct", "throughput"), ("latency_p99_ms_pct", "p99 latency")):
            value = changes.get(key)
            if value is not None:
                parts.append(f"{value:+.1f}% {label}")
        if parts:
            lines.append(f"[COMPARE] {name} ({report.comparison.against[name]}): " + ", ".join(parts))
    lines.append(f"[REPORT] Baseline saved to {report_path}")
    return lines
