"""Pure comparison of reports: workload fingerprints and percent changes of headline metrics."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from loadtest.metrics import percent_change
from services.report_schema import BenchmarkConfig, Comparison, Environment, Metrics, Report

COMPARED_METRICS = (
    "throughput_req_per_sec",
    "output_tokens_per_sec",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "gpu_mem_peak_gb",
)


def workload_fingerprint(config: BenchmarkConfig, env: Environment) -> str:
    """Hash of what makes two runs comparable: load shape, lengths, dataset, model and hardware."""
    key = {
        "mode": config.mode,
        "concurrency": config.concurrency,
        "requests": config.requests,
        "duration_s": config.duration_s,
        "max_tokens": config.max_tokens,
        "temperature": config.temperature,
        "dataset": config.dataset,
        "model": env.served_model_name,
        "synthetic": env.synthetic,
        "gpu_model": env.gpu_model,
        "gpu_count": env.gpu_count,
        "cpu_model": None if env.gpu_model else env.cpu_model,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]


def metric_changes(new: Metrics, old: Metrics) -> dict[str, float | None]:
    """``{metric}_pct`` percent changes of :data:`COMPARED_METRICS` (None where either side is missing)."""
    return {f"{name}_pct": percent_change(getattr(new, name), getattr(old, name)) for name in COMPARED_METRICS}


def compare_with_history(
    config: BenchmarkConfig, env: Environment, metrics: Metrics, history: Sequence[Report]
) -> Comparison:
    """Compare with the latest earlier report of the same workload fingerprint (``vs_previous``)."""
    fingerprint = workload_fingerprint(config, env)
    same = [r for r in history if workload_fingerprint(r.config, r.environment) == fingerprint]
    comparison = Comparison()
    if not same:
        comparison.notes.append(f"first run of workload {fingerprint}: nothing to compare with")
        return comparison
    previous = same[-1]
    comparison.against["vs_previous"] = previous.report_id
    comparison.changes_pct["vs_previous"] = metric_changes(metrics, previous.metrics)
    return comparison
