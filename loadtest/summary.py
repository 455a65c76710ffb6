"""Terminal summary of a report (pure): the ``[RESULT]`` and ``[REPORT]`` lines ``make benchmark`` prints."""

from __future__ import annotations

from services.report_schema import Report


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}ms"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


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
    lines.append(
        f"[RESULT] TPOT P50 {_ms(m.tpot.p50_ms)} P99 {_ms(m.tpot.p99_ms)} | ITL P50 {_ms(m.itl.p50_ms)} "
        f"P99 {_ms(m.itl.p99_ms)} | output tokens mean {_num(m.output_lengths.actual_mean)} "
        f"(asked {_num(m.output_lengths.requested_mean)}) | peak concurrency {m.peak_concurrency}"
    )
    if m.goodput_req_per_sec is not None:
        slo = ",".join(f"{k}<={v:g}" for k, v in m.slo.items())
        lines.append(f"[RESULT] Goodput: {m.goodput_req_per_sec:.2f} req/s ({m.goodput_percent:.1f}% within {slo})")
    if m.output_lengths.usage_missing:
        lines.append(f"[WARN] {m.output_lengths.usage_missing} request(s) carried no usage block: tokens unknown")
    if report.server is not None:
        checks = {a.name: a for a in report.server.agreements}
        verdict = "agree" if not report.server.disagreements else "DISAGREE: " + "; ".join(report.server.disagreements)
        lines.append(
            f"[SERVER] vLLM /metrics: {report.server.requests_succeeded} requests, "
            f"{report.server.generation_tokens} generated tokens, TTFT mean {_ms(report.server.ttft.mean_ms)} "
            f"(client {_ms(checks['ttft_mean_ms'].client)}) — client and server {verdict}"
        )
    if report.client is not None and report.client.client_limited:
        lines.append(f"[WARN] Client-limited run: {report.client.reason}. The numbers measure the load generator.")
    lines.append(f"[INSIGHT] Key insight: {m.key_insight}")
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
