"""Pure comparison of reports: workload fingerprints and percent changes of headline metrics.

Two runs are comparable when their workload fingerprints match: same load shape, lengths, dataset, model and
hardware. A new report is compared with the previous report of its fingerprint (``vs_previous``) and with every
named baseline (``vs_<name>``); a baseline of another fingerprint is refused, naming the fields that differ.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from core.report_schema import BenchmarkConfig, Comparison, Environment, Metrics, Report
from core.serverview import ServerView
from core.stats import percent_change

COMPARED_METRICS = (
    "throughput_req_per_sec",
    "output_tokens_per_sec",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "gpu_mem_peak_gb",
    "vllm_rss_peak_gb",
    "error_rate_percent",
)
ENERGY_COST_METRICS = (
    "energy_j_per_output_token",
    "output_tokens_per_j",
    "cost_usd_per_1m_output_tokens",
    "cost_usd_per_1m_total_tokens",
    "energy_cost_usd_per_1m_output_tokens",
)
"""Compared where measured or priced on both sides (docs/energy.md); left out of ``changes_pct`` otherwise, so a
comparison of runs without energy or prices reads as before."""
PREVIOUS = "vs_previous"
# Not part of the fingerprint, but worth a note when they differ between compared runs.
FLAGGED_ENV_FIELDS = ("vllm_version", "vllm_fingerprint", "model_revision", "driver_version")


# The bundled corpus moved with the load generator's package (loadtest/ -> loadgen/workloads/). Fingerprints keep the
# name it had when the first reports were written, so stored reports and baselines stay comparable with new runs.
MOVED_DATASETS = {"loadgen/workloads/data/prompts_zh.jsonl": "loadtest/data/prompts_zh.jsonl"}
_CURRENT_PATHS = {old: new for new, old in MOVED_DATASETS.items()}


def current_dataset(path: str) -> str:
    """The path a user finds the dataset at today: a moved corpus's old name (an old report's, or the fingerprint's
    alias) becomes its current one; any other path is returned as given."""
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
    """``name: old -> new`` for every fingerprint field that differs (``a`` is the older run); a moved dataset is
    named by its current path (:func:`current_dataset`), never by the alias the fingerprint keeps."""
    return [
        f"{key}: {_shown(key, a.get(key))!r} -> {_shown(key, b.get(key))!r}"
        for key in sorted(set(a) | set(b))
        if a.get(key) != b.get(key)
    ]


def metric_changes(new: Metrics, old: Metrics) -> dict[str, float | None]:
    """``{metric}_pct`` percent changes of :data:`COMPARED_METRICS`, 0.01 % resolution (None where a side is
    missing), ``error_rate_percent_pp``: the error rate's change in percentage points (a relative change of a
    rate that was 0 is undefined, the absolute one is not), and those of :data:`ENERGY_COST_METRICS` that both sides
    have."""
    out: dict[str, float | None] = {}
    for name in COMPARED_METRICS:
        change = percent_change(getattr(new, name), getattr(old, name))
        out[f"{name}_pct"] = None if change is None else round(change, 2)
    new_rate, old_rate = new.error_rate_percent, old.error_rate_percent
    out["error_rate_percent_pp"] = None if new_rate is None or old_rate is None else round(new_rate - old_rate, 2)
    for name in ENERGY_COST_METRICS:
        change = percent_change(getattr(new, name), getattr(old, name))
        if change is not None:
            out[f"{name}_pct"] = round(change, 2)
    return out


MAX_CUT_SHARE_PCT = 10.0
"""A run whose end cut more than this share of its measured requests (they outlasted DURATION and DRAIN_S) is no
reference: its figures are of the requests that finished, the short ones."""


def unusable_reason(report: Report) -> str | None:
    """Why ``report`` cannot stand as the reference of a comparison — the one test of "no reference" (``make
    baseline``, ``--baseline``, GATE, ``vs_previous``, the terminal's ``[REPORT]`` line): interrupted run, ended
    early (server down), no measured request sent, more than :data:`MAX_CUT_SHARE_PCT` of its requests cut by its
    end (every one, when none ended), vLLM switched during it (rows of two models), no successful request; None when
    it can."""
    m = report.metrics
    if report.interrupted:
        return f"{report.report_id} was interrupted (Ctrl-C) before its planned end"
    if report.server_down:
        return f"{report.report_id} was ended early: vLLM stopped answering"
    if report.engine_switch:
        return f"{report.report_id} spans a switch of vLLM ({report.engine_switch.split(': ', 1)[0]})"
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
    """Why ``baseline`` cannot be the reference of a run whose :func:`fingerprint_fields` are ``fields`` — it cannot
    judge (no success, interrupted) or its workload differs (naming each field); None when it can. The one test of
    comparability: the sidecar's comparison after a run and the benchmark's preflight before one both use it."""
    unusable = unusable_reason(baseline)
    if unusable:
        return f"cannot judge: {unusable}"
    old_fields = fingerprint_fields(baseline.config, baseline.environment)
    if fingerprint_of(old_fields) != fingerprint_of(fields):
        return f"workload differs from {baseline.report_id} ({'; '.join(differing_fields(old_fields, fields))})"
    return None


def _flag_env(name: str, env: Environment, old: Report) -> list[str]:
    """Notes for environment fields outside the fingerprint that changed since ``old``; a field one side could not
    read (None: vLLM down at report time, no GPU driver) is unknown, not a change."""
    notes = []
    for key in FLAGGED_ENV_FIELDS:
        before, now = getattr(old.environment, key), getattr(env, key)
        if before is not None and now is not None and before != now:
            notes.append(f"{name}: {key} differs ({before} -> {now}); the comparison includes that change")
    return notes


PREFIX_CACHE_GAP_PP = 20.0
"""Prefix-cache hit rates (percentage points) further apart than this between two compared runs get a note."""


def _flag_prefix_cache(name: str, server: ServerView | None, old: Report) -> list[str]:
    """A note when vLLM's prefix cache served one run much more than the other (``server``: the new run's view).

    vLLM keeps the KV blocks of earlier prompts: a run that repeats an earlier run's prompts (the same dataset and
    seed) finds them cached and its TTFT drops with no change of configuration (measured: 0 % -> 74 % -> 83 % hit
    rate over three identical runs, p99 TTFT -78 %)."""
    new_rate = server.prefix_cache_hit_rate_percent if server else None
    old_rate = old.server.prefix_cache_hit_rate_percent if old.server else None
    if new_rate is None or old_rate is None or abs(new_rate - old_rate) <= PREFIX_CACHE_GAP_PP:
        return []
    return [
        f"{name}: vLLM's prefix cache served {old_rate:.0f}% of the prompt tokens then and {new_rate:.0f}% now "
        "(it keeps earlier runs' prompts): the TTFT and throughput changes include that; restart vLLM "
        "(./start_vllm.sh) before each run to compare cold caches, or vary the prompts (SEED)"
    ]


def compare_with_history(
    config: BenchmarkConfig,
    env: Environment,
    metrics: Metrics,
    history: Sequence[Report],
    baselines: Mapping[str, Report | str] | None = None,
    server: ServerView | None = None,
    switched: str | None = None,
) -> Comparison:
    """Compare with the latest earlier report of the same fingerprint and with every named baseline; a run that spans
    a switch of vLLM (``switched``: its ``engine_switch``) with none: its rows are of two models, no one workload.

    Args:
        history: earlier reports, oldest first.
        baselines: baseline name -> its report, or a string saying why it could not be loaded.
        server: the new run's view of vLLM's /metrics (None: none), for the prefix-cache note
            (:func:`_flag_prefix_cache`).
    """
    fields = fingerprint_fields(config, env)
    fingerprint = fingerprint_of(fields)
    comparison = Comparison(fingerprint=fingerprint)
    if switched:
        why = f"not compared: {switched}"
        return Comparison(fingerprint=fingerprint, notes=[why], refused={f"vs_{n}": why for n in baselines or {}})
    same = [
        r for r in history if workload_fingerprint(r.config, r.environment) == fingerprint and not unusable_reason(r)
    ]
    if same:
        previous = same[-1]
        comparison.against[PREVIOUS] = previous.report_id
        comparison.changes_pct[PREVIOUS] = metric_changes(metrics, previous.metrics)
        comparison.notes.extend(_flag_env(PREVIOUS, env, previous))
        comparison.notes.extend(_flag_prefix_cache(PREVIOUS, server, previous))
    else:
        comparison.notes.append(f"first run of workload {fingerprint}: no previous run to compare with")
    for name, baseline in sorted((baselines or {}).items()):
        key = f"vs_{name}"
        if isinstance(baseline, str):
            comparison.refused[key] = baseline
            comparison.notes.append(f"{key}: not compared: {baseline}")
            continue
        reason = refusal_reason(baseline, fields)
        if reason:
            comparison.refused[key] = reason
            comparison.notes.append(f"{key}: refused: {reason}")
            continue
        comparison.against[key] = baseline.report_id
        comparison.changes_pct[key] = metric_changes(metrics, baseline.metrics)
        comparison.notes.extend(_flag_env(key, env, baseline))
        comparison.notes.extend(_flag_prefix_cache(key, server, baseline))
    return comparison
