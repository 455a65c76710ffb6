"""The one comparison (pure): B against A, point by point, for reports, series, the gate and ``make compare``.

:func:`compare_points` is the diff (:class:`core.intervals.Comparison`). Points pair by kind (synchronous, rate,
concurrency, throughput) and rank within it; ``make compare`` lists configuration differences first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from core.fingerprint import current_dataset, fingerprint_fields, refusal_reason, unusable_reason, workload_fingerprint
from core.intervals import Comparison, PointComparison, judge
from core.redact import is_secret_flag
from core.report_schema import SCHEMA_VERSION, BenchmarkConfig, Environment, Report
from core.series_stats import PREFIX_CACHE_GAP_PP, SERIES_METRICS, Knee, SeriesPoint, report_as_point

# vLLM flags that say where it listens or what it is called, not how it serves (left out of the differences)
IGNORED_VLLM_FLAGS = frozenset({"--host", "--port", "--model", "--served-model-name"})
# config fields that do not change what is measured
IGNORED_CONFIG_FIELDS = frozenset({"vllm_url", "model", "dataset_file", "prefix_file", "drain_s", "request_timeout_s"})
Group = Literal["model", "vLLM flags", "hardware", "software", "workload"]
# knobs of one load mode only: the other mode's run has none (an open-loop run has no users), so they are compared
# where they apply and shown as None where they do not
MODE_FIELDS = {
    "closed_loop": frozenset({"concurrency", "ramp_up_s"}),
    "open_loop": frozenset({"rate_req_per_sec", "burstiness", "max_in_flight", "rate_end_req_per_sec"}),
}


class Difference(BaseModel):
    """One configuration field that differs between A and B."""

    group: Group
    field: str
    a: str | None
    b: str | None


class Side(BaseModel):
    """One side of the comparison: a report (one point, one run) or a series."""

    ref: str = Field(description="As given: a report id, a series id or a baseline name.")
    kind: Literal["report", "series"]
    id: str = Field(description="The report or series id it resolved to.")
    environment: Environment
    config: BenchmarkConfig
    points: list[SeriesPoint]
    knee: Knee | None = None
    repeat: int = 1


class ABComparison(Comparison):
    """``reports/benchmark_compare_YYYYMMDD_HHMMSS.json``: the comparison of B against A with both sides and what
    differs between them."""

    schema_version: str = SCHEMA_VERSION
    kind: Literal["compare"] = "compare"
    compare_id: str
    timestamp: str
    a: Side
    b: Side
    differences: list[Difference] = Field(description="Configuration fields that differ: model, vLLM flags first.")
    threshold_pct: float = Field(description="A worse change whose whole interval lies beyond this is a regression.")
    markdown_file: str | None = None
    html_file: str | None = None


def vllm_flags(args: list[str]) -> dict[str, str]:
    """A vLLM command line's flags -> values (bare: ``"true"``), secret flags left out."""
    flags: dict[str, str] = {}
    for token, after in zip(args, [*args[1:], "--"], strict=False):
        if token.startswith("--"):  # a value (a token after a flag without "=") is skipped as no flag
            name, eq, value = token.partition("=")
            flags[name] = value if eq else "true" if after.startswith("--") else after
    return {name: value for name, value in flags.items() if not is_secret_flag(name)}


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def flag_text(value: str | None) -> str:
    """A vLLM flag's value as compared: ``unset (vLLM's default)`` for a flag one side did not pass."""
    return "unset (vLLM's default)" if value is None else value


def _workload(config: BenchmarkConfig) -> dict[str, object]:
    """The config as compared: the other load mode's knobs None, a moved dataset at its current path."""
    fields = config.model_dump()
    for mode, names in MODE_FIELDS.items():
        if mode != config.mode:
            fields.update(dict.fromkeys(names))
    fields["dataset"] = current_dataset(config.dataset)
    return fields


def differences(a: Side, b: Side) -> list[Difference]:
    """Fields that differ, grouped and ordered: model, vLLM flags, hardware, software, workload."""
    ea, eb = a.environment, b.environment
    out: list[Difference] = []

    def add(group: Group, field: str, va: object, vb: object) -> None:
        if va != vb:
            out.append(Difference(group=group, field=field, a=_text(va), b=_text(vb)))

    for field in ("served_model_name", "model_path", "model_revision", "synthetic"):
        add("model", field, getattr(ea, field), getattr(eb, field))
    fa, fb = vllm_flags(ea.vllm_args), vllm_flags(eb.vllm_args)
    for flag in sorted((set(fa) | set(fb)) - IGNORED_VLLM_FLAGS):
        add("vLLM flags", flag, fa.get(flag), fb.get(flag))
    for field in ("gpu_model", "gpu_count", "driver_version", "cpu_model", "cpu_cores", "ram_total_gb"):
        add("hardware", field, getattr(ea, field), getattr(eb, field))
    for field in ("vllm_version", "vllm_commit", "cuda_version", "project_git_commit"):
        add("software", field, getattr(ea, field), getattr(eb, field))
    ca, cb = _workload(a.config), _workload(b.config)
    for field in sorted(set(ca) - IGNORED_CONFIG_FIELDS):
        add("workload", field, ca.get(field), cb.get(field))
    add("workload", "repeat (runs per point)", a.repeat, b.repeat)
    return out


PREVIOUS = "vs_previous"
# Not part of the fingerprint, but worth a note when they differ between compared runs (with vLLM's flags).
FLAGGED_ENV_FIELDS = ("vllm_version", "vllm_fingerprint", "model_revision", "driver_version")


def compare_points(
    b: list[SeriesPoint], a: list[SeriesPoint], against: str, threshold_pct: float, by_fingerprint: bool = True
) -> Comparison:
    """Each point of B against its pair in A, every :data:`SERIES_METRICS` a :class:`core.intervals.Change` (a
    regression lies wholly beyond ``threshold_pct``); refused when pairing by fingerprint finds no pair; the
    prefix-cache hit rates ``(A, B)`` of the pair furthest apart when beyond :data:`PREFIX_CACHE_GAP_PP`. Pairs, in B's
    order: by workload fingerprint, or by kind and rank within it."""
    if by_fingerprint:
        same = {p.fingerprint: p for p in a if p.fingerprint}
        pairs = [(same[p.fingerprint], p) for p in b if p.fingerprint in same]
    else:
        of_kind = {kind: [p for p in a if p.kind == kind] for kind in {p.kind for p in a}}
        ranked = [(of_kind.get(p.kind, []), [q for q in b if q.kind == p.kind].index(p), p) for p in b]
        pairs = [(peers[rank], p) for peers, rank, p in ranked if rank < len(peers)]
    points = [
        PointComparison(
            label=pb.label,
            against_label=pa.label,
            against_ids=pa.report_ids,
            changes={
                name: judge(pa.metrics.get(name), pb.metrics.get(name), better, threshold_pct)
                for name, (_, _, better) in SERIES_METRICS.items()
            },
        )
        for pa, pb in pairs
    ]
    refused = None
    if by_fingerprint and not points:
        refused = f"no load point of {against} has the same workload fingerprint (model, load, lengths, hardware)"
    rates = [(c.a_mean, c.b_mean) for p in points if (c := p.changes.get("prefix_cache_hit_rate_percent")) is not None
             and c.a_mean is not None and c.b_mean is not None]  # fmt: skip
    widest = max(rates, key=lambda r: abs(r[1] - r[0]), default=None)  # beyond PREFIX_CACHE_GAP_PP: a note
    if widest is not None and abs(widest[1] - widest[0]) <= PREFIX_CACHE_GAP_PP:
        widest = None
    return Comparison(against=against, points=points, refused=refused, prefix_cache_percent=widest)


def compare_sides(a: Side, b: Side, compare_id: str, timestamp: str, threshold_pct: float) -> ABComparison:
    """``make compare``: B against A (see the module docstring)."""
    comparison = compare_points(b.points, a.points, a.id, threshold_pct, by_fingerprint=False)
    notes = []
    if not comparison.points:
        notes.append("no load point of A pairs with one of B (different kinds of load): see the curves")
    if max(a.repeat, b.repeat) < 2:
        notes.append("single runs on both sides: changes are plain percentages (REPEAT>=2 gives intervals)")
    return ABComparison(
        **comparison.model_dump(exclude={"notes"}),
        compare_id=compare_id,
        timestamp=timestamp,
        a=a,
        b=b,
        differences=differences(a, b),
        threshold_pct=threshold_pct,
        notes=notes,
    )


def environment_notes(old: Environment, new: Environment) -> list[str]:
    """``vllm_version differs (0.6 -> 0.7)`` per changed vLLM flag or environment field (None: unknown)."""
    fa, fb = vllm_flags(old.vllm_args), vllm_flags(new.vllm_args)
    notes = [
        f"vLLM flag {flag} differs ({flag_text(fa.get(flag))} -> {flag_text(fb.get(flag))})"
        for flag in sorted((set(fa) | set(fb)) - IGNORED_VLLM_FLAGS)
        if fa.get(flag) != fb.get(flag)
    ]
    for key in FLAGGED_ENV_FIELDS:
        before, now = getattr(old, key), getattr(new, key)
        if key == "vllm_fingerprint" and notes and old.vllm_version == new.vllm_version:
            continue  # vLLM's system_fingerprint hashes its config: the flag notes above are the change it shows
        if before is not None and now is not None and before != now:
            notes.append(f"{key} differs ({before} -> {now})")
    return [f"{note}; the comparison includes that change" for note in notes]


def prefix_cache_notes(comparison: Comparison) -> list[str]:
    """A note when vLLM's prefix cache served one side much more than the other (repeated prompts hit the cache: 0 % ->
    83 % over three identical runs, p99 TTFT -78 %)."""
    if comparison.prefix_cache_percent is None:
        return []
    then, now = comparison.prefix_cache_percent
    return [
        f"vLLM's prefix cache served {then:.0f}% of the prompt tokens then and {now:.0f}% now "
        "(it keeps earlier runs' prompts): the TTFT and throughput changes include that; restart vLLM "
        "(./start_vllm.sh) before each run to compare cold caches, or vary the prompts (SEED)"
    ]


def compare_reports(new: Report, old: Report, threshold_pct: float) -> Comparison:
    """One run against another of its workload: one-run points, with environment and prefix-cache notes."""
    comparison = compare_points([report_as_point(new, "")], [report_as_point(old, "")], old.report_id, threshold_pct)
    comparison.notes = environment_notes(old.environment, new.environment) + prefix_cache_notes(comparison)
    return comparison


def compare_with_history(
    report: Report, history: Sequence[Report], baselines: Mapping[str, Report | str], threshold_pct: float
) -> dict[str, Comparison]:
    """``vs_previous`` (the latest earlier reference report of the fingerprint in ``history``, oldest first) and
    ``vs_<name>`` for every baseline (name -> its report, or why it could not be loaded), compared or refused; a run
    spanning an engine switch is refused everywhere."""
    if report.engine_switch:
        return {f"vs_{name}": Comparison(refused=report.engine_switch) for name in sorted(baselines)}
    fingerprint = workload_fingerprint(report.config, report.environment)
    out: dict[str, Comparison] = {}
    same = [
        r for r in history if workload_fingerprint(r.config, r.environment) == fingerprint and not unusable_reason(r)
    ]
    if same:
        out[PREVIOUS] = compare_reports(report, same[-1], threshold_pct)
    for name, baseline in sorted(baselines.items()):
        if isinstance(baseline, str):
            out[f"vs_{name}"] = Comparison(refused=baseline)
            continue
        reason = refusal_reason(baseline, fingerprint_fields(report.config, report.environment))
        out[f"vs_{name}"] = (
            Comparison(against=baseline.report_id, refused=reason)
            if reason
            else compare_reports(report, baseline, threshold_pct)
        )
    return out


def comparison_lines(name: str, comparison: Comparison) -> list[str]:
    """A comparison's refusal or notes, each line prefixed by its name."""
    if comparison.refused:
        return [f"{name}: not compared: {comparison.refused}"]
    return [f"{name}: {note}" for note in comparison.notes]


def report_notes(report: Report) -> list[str]:
    """"first run of workload ..." without ``vs_previous``, then each comparison's lines."""
    if report.engine_switch:
        first = [f"not compared: {report.engine_switch}"]
    elif PREVIOUS in report.comparison:
        first = []
    else:
        first = [f"first run of workload {report.fingerprint}: no previous run to compare with"]
    return first + [line for name, c in report.comparison.items() for line in comparison_lines(name, c)]
