"""Whether two runs are comparable (pure): workload fingerprints, and why a report can be no reference."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from core.records import MODEL_GONE_LINE
from core.report_schema import BenchmarkConfig, Environment, Report

# The bundled corpus moved with the load generator's package (loadtest/ -> loadgen/workloads/). Fingerprints keep the
# name it had when the first reports were written, so stored reports and baselines stay comparable with new runs.
MOVED_DATASETS = {"loadgen/workloads/data/prompts_zh.jsonl": "loadtest/data/prompts_zh.jsonl"}
_CURRENT_PATHS = {old: new for new, old in MOVED_DATASETS.items()}


def current_dataset(path: str) -> str:
    """The dataset's path today: a moved corpus's old name becomes its current one."""
    return _CURRENT_PATHS.get(path, path)


def _shown(key: str, value: Any) -> Any:
    return current_dataset(value) if key == "dataset" and isinstance(value, str) else value


def fingerprint_fields(config: BenchmarkConfig, env: Environment) -> dict[str, Any]:
    """What makes two runs comparable: load shape, lengths, dataset, model and hardware (not the seed or SLOs)."""
    return {
        "mode": config.mode,
        "concurrency": config.concurrency,
        "rate_req_per_sec": config.rate_req_per_sec,
        "burstiness": config.burstiness,
        "requests": config.requests,
        "duration_s": config.duration_s,
        "max_tokens": config.max_tokens,
        "output_len_mean": config.output_len_mean,
        "output_len_p95": config.output_len_p95,
        "ramp_up_s": config.ramp_up_s,
        "ignore_eos": config.ignore_eos,
        "temperature": config.temperature,
        "dataset": MOVED_DATASETS.get(config.dataset, config.dataset),
        "input_mix": config.input_mix,
        "max_in_flight": config.max_in_flight,
        "rate_end_req_per_sec": config.rate_end_req_per_sec,
        "input_len_tokens": config.input_len_tokens,
        "session_turns": config.session_turns,
        # only for conversations with a think time or real follow-ups: earlier runs keep their fingerprint
        **({"think_time": config.think_time.text} if config.think_time else {}),
        **({"session_followups": config.session_followups} if config.session_followups == "dataset" else {}),
        # only when set, so runs without prefixes keep the fingerprint they had before these fields existed
        **(
            {"prefix_len_tokens": config.prefix_len_tokens, "prefix_count": config.prefix_count}
            if config.prefix_len_tokens
            else {}
        ),
        # likewise only for a trace replay: its content, speed and rows (its path is the dataset)
        **(
            {"trace_sha256": config.trace_sha256, "trace_speed": config.trace_speed, "trace_rows": config.trace_rows}
            if config.trace_sha256
            else {}
        ),
        # only with the router (REPLICAS > 1 or ENGINE_URLS): single-engine runs keep their fingerprint
        **(
            {"replicas": config.replicas, "router_policy": config.router_policy,
             "router_version": config.router_version}
            if config.replicas is not None
            else {}
        ),
        "model": env.served_model_name,
        "synthetic": env.synthetic,
        "gpu_model": env.gpu_model,
        "gpu_count": env.gpu_count,
        "cpu_model": None if env.gpu_model else env.cpu_model,
    }


def fingerprint_of(fields: Mapping[str, Any]) -> str:
    """Short hash (12 hex digits) of :func:`fingerprint_fields`."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


def workload_fingerprint(config: BenchmarkConfig, env: Environment) -> str:
    """Hash of what makes two runs comparable (see :func:`fingerprint_fields`)."""
    return fingerprint_of(fingerprint_fields(config, env))


def differing_fields(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """``name: old -> new`` for every differing fingerprint field (``a`` is the older run)."""
    return [
        f"{key}: {_shown(key, a.get(key))!r} -> {_shown(key, b.get(key))!r}"
        for key in sorted(set(a) | set(b))
        if a.get(key) != b.get(key)
    ]


MAX_CUT_SHARE_PCT = 10.0
"""A run whose end cut more than this share of its measured requests (they outlasted DURATION and DRAIN_S) is no
reference: its figures are of the requests that finished, the short ones."""


def server_down_words(line: str) -> str:
    """Why a run ended early in a few words: switched to another model, or vLLM stopped answering."""
    if line.startswith(MODEL_GONE_LINE):
        return "vLLM stopped serving the run's model (the stack was switched to another model)"
    return "the server stopped answering"


def unusable_reason(report: Report) -> str | None:
    """Why ``report`` cannot be a comparison's reference (interrupted, ended early, nothing sent, over
    :data:`MAX_CUT_SHARE_PCT` cut, engine switched, profiled, no success); None when it can."""
    m = report.metrics
    if report.interrupted:
        return f"{report.report_id} was interrupted (Ctrl-C) before its planned end"
    if report.server_down:
        return f"{report.report_id} was ended early: {server_down_words(report.server_down)}"
    if report.engine_switch:
        return f"{report.report_id} spans a switch of vLLM ({report.engine_switch.split(': ', 1)[0]})"
    if report.config.profiled:
        return (f"{report.report_id} was profiled (PROFILE=1: vLLM's torch profiler slows the engine through its "
                "window)")  # fmt: skip
    sent = m.requests_total + m.requests_incomplete
    if not sent:
        return f"{report.report_id} sent no measured request (its warmup failed, or it was stopped before)"
    if m.requests_incomplete == sent:
        return (
            f"{report.report_id} had all its {sent} requests cut by its end (none ended within DURATION and "
            "DRAIN_S); run longer or with less load"
        )
    if 100.0 * m.requests_incomplete / sent > MAX_CUT_SHARE_PCT:
        return (
            f"{report.report_id} had {m.requests_incomplete} of its {sent} requests cut by its end (more than "
            f"{MAX_CUT_SHARE_PCT:g}%: they outlasted DURATION and DRAIN_S, so its figures are of the short ones); "
            "run longer or with less load"
        )
    if m.requests_ok == 0:
        return f"{report.report_id} has no successful request (nothing to compare with)"
    return None


def refusal_reason(baseline: Report, fields: Mapping[str, Any]) -> str | None:
    """Why ``baseline`` cannot be the reference of a run with fingerprint ``fields``; None when it can."""
    unusable = unusable_reason(baseline)
    if unusable:
        return f"cannot judge: {unusable}"
    old_fields = fingerprint_fields(baseline.config, baseline.environment)
    if fingerprint_of(old_fields) != fingerprint_of(fields):
        return f"workload differs from {baseline.report_id} ({'; '.join(differing_fields(old_fields, fields))})"
    return None
