"""A/B comparison of two results (pure): two reports, two series, or one of each (``make compare A=… B=…``).

What differs between the two configurations comes first — the model, vLLM's own flags (from the command line the
launcher recorded, ``environment.vllm_args``), hardware, software, then the workload — and then, load point by load
point, each headline metric of B against A: the percent change with its 95 % interval and a verdict when both sides
have repeated runs (:mod:`core.intervals`), the plain percent change otherwise. Points are paired by kind
(synchronous, rate, concurrency, maximum throughput) and rank within it, so the third rate of one automatic sweep
meets the third rate of the other even though their rates differ (both are the same fraction of their range).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from core.compare import current_dataset
from core.intervals import Change, judge
from core.redact import is_secret_flag
from core.report_schema import SCHEMA_VERSION, BenchmarkConfig, Environment
from core.series import SERIES_METRICS, Knee, PointComparison, SeriesPoint

# vLLM flags that say where it listens or what it is called, not how it serves (left out of the differences)
IGNORED_VLLM_FLAGS = frozenset({"--host", "--port", "--model", "--served-model-name"})
# config fields that do not change what is measured
IGNORED_CONFIG_FIELDS = frozenset(
    {"vllm_url", "model", "dataset_file", "prefix_file", "drain_s", "request_timeout_s"}
)
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


class ABComparison(BaseModel):
    """``reports/benchmark_compare_YYYYMMDD_HHMMSS.json``: B against A."""

    schema_version: str = SCHEMA_VERSION
    kind: Literal["compare"] = "compare"
    compare_id: str
    timestamp: str
    a: Side
    b: Side
    differences: list[Difference] = Field(description="Configuration fields that differ: model, vLLM flags first.")
    points: list[PointComparison] = Field(description="Paired load points, B against A.")
    threshold_pct: float = Field(description="A worse change whose whole interval lies beyond this is a regression.")
    notes: list[str] = Field(default_factory=list)
    markdown_file: str | None = None
    html_file: str | None = None


def vllm_flags(args: list[str]) -> dict[str, str]:
    """``--flag value`` / ``--flag=value`` / bare ``--flag`` (``"true"``) of a vLLM command line; what precedes the
    first flag (``-m vllm.entrypoints…``) is skipped. ``--no-x`` stays as written. Secret flags (``--api-key``,
    :func:`core.redact.is_secret_flag`) are left out: they change who may call vLLM, not how it serves, and their
    values are masked anyway."""
    flags: dict[str, str] = {}
    i = 0
    while i < len(args):
        token = args[i]
        if not token.startswith("--"):
            i += 1
            continue
        name, eq, value = token.partition("=")
        if eq:
            flags[name] = value
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            flags[name] = args[i + 1]
            i += 1
        else:
            flags[name] = "true"
        i += 1
    return {name: value for name, value in flags.items() if not is_secret_flag(name)}


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _workload(config: BenchmarkConfig) -> dict[str, object]:
    """The config's fields as compared: knobs of the other load mode (:data:`MODE_FIELDS`) None, a moved dataset at
    its current path."""
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
    if a.repeat != b.repeat:
        add("workload", "repeat (runs per point)", a.repeat, b.repeat)
    return out


def pair_points(a: list[SeriesPoint], b: list[SeriesPoint]) -> list[tuple[SeriesPoint, SeriesPoint]]:
    """Points of A and B paired by kind and rank within the kind (load order kept)."""

    def by_kind(points: list[SeriesPoint]) -> dict[str, list[SeriesPoint]]:
        groups: dict[str, list[SeriesPoint]] = {}
        for p in points:
            groups.setdefault(p.kind, []).append(p)
        return groups

    ga, gb = by_kind(a), by_kind(b)
    pairs = []
    for point in b:
        rank = gb[point.kind].index(point)
        others = ga.get(point.kind, [])
        if rank < len(others):
            pairs.append((others[rank], point))
    return pairs


def compare_sides(a: Side, b: Side, compare_id: str, timestamp: str, threshold_pct: float) -> ABComparison:
    """The whole A/B comparison (see the module docstring)."""
    points = [
        PointComparison(
            label=pb.label,
            against_label=pa.label,
            against_ids=pa.report_ids,
            changes={
                name: _change(pa, pb, name, better, threshold_pct) for name, (_, _, better) in SERIES_METRICS.items()
            },
        )
        for pa, pb in pair_points(a.points, b.points)
    ]
    notes = []
    if not points:
        notes.append("no load point of A pairs with one of B (different kinds of load): see the curves")
    if max(a.repeat, b.repeat) < 2:
        notes.append("single runs on both sides: changes are plain percentages (REPEAT>=2 gives intervals)")
    return ABComparison(
        compare_id=compare_id,
        timestamp=timestamp,
        a=a,
        b=b,
        differences=differences(a, b),
        points=points,
        threshold_pct=threshold_pct,
        notes=notes,
    )


def _change(pa: SeriesPoint, pb: SeriesPoint, name: str, better: int, threshold_pct: float) -> Change:
    return judge(pa.metrics.get(name), pb.metrics.get(name), better, threshold_pct)
