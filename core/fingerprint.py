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


FINGERPRINT_CONFIG = (
    "mode", "concurrency", "rate_req_per_sec", "burstiness", "requests", "duration_s", "max_tokens", "output_len_mean",
    "output_len_p95", "ramp_up_s", "ignore_eos", "temperature", "input_mix", "max_in_flight", "rate_end_req_per_sec",
    "input_len_tokens", "session_turns",
)
"""Config fields in every fingerprint as they are (the hash sorts keys: their order does not matter)."""


def fingerprint_fields(config: BenchmarkConfig, env: Environment) -> dict[str, Any]:
    """What makes two runs comparable: load shape, lengths, dataset, model and hardware (not the seed or SLOs)."""
    fields = {name: getattr(config, name) for name in FINGERPRINT_CONFIG}
    fields["dataset"] = MOVED_DATASETS.get(config.dataset, config.dataset)
    # the later fields only where they apply, so that runs without them keep their earlier fingerprint
    if config.think_time:
        fields["think_time"] = config.think_time.text
    if config.session_followups == "dataset":
        fields["session_followups"] = config.session_followups
    if config.prefix_len_tokens:
        fields |= {name: getattr(config, name) for name in ("prefix_len_tokens", "prefix_count")}
    if config.trace_sha256:  # a trace replay (its path is the dataset)
        fields |= {name: getattr(config, name) for name in ("trace_sha256", "trace_speed", "trace_rows")}
    if config.replicas is not None:  # with the router (REPLICAS > 1 or ENGINE_URLS)
        fields |= {name: getattr(config, name) for name in ("replicas", "router_policy", "router_version")}
    return fields | {"model": env.served_model_name, "synthetic": env.synthetic, "gpu_model": env.gpu_model,
                     "gpu_count": env.gpu_count, "cpu_model": None if env.gpu_model else env.cpu_model}  # fmt: skip


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
