"""The loop over a series' runs (a single run is a series of one point): each load point REPEAT times, COOLDOWN_S
apart, the warmup once. ``SWEEP=auto`` (GuideLLM's sweep): one user, the closed loop at CONCURRENCY, then SWEEP_RATES
rates ``sync + (max − sync) · i / (N + 1)`` between their throughputs; ``SWEEP=concurrency:1,2,4`` /
``SWEEP=rate:0.5,1,2``: those loads. Ctrl-C stops after the run in progress.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tqdm import tqdm

from core.report_schema import BenchmarkConfig, Report
from core.series_stats import PointKind, PointPlan, report_values
from core.settings import Settings
from loadgen.plan import load_processes


@dataclass
class RunResult:
    """One run of a point: its report (None: none written) and its ``path``, whether Ctrl-C ended it, why it failed
    (``empty``: nothing to report), and whether vLLM stopped answering."""

    report: Report | None
    interrupted: bool = False
    error: str | None = None
    server_down: str | None = None  # vLLM stopped answering: the run was ended early (when and how)
    path: str = ""
    empty: bool = False
    exit_code: int | None = None  # the run stopped before measuring: the benchmark's exit code (2 usage, 4 warmup)


RunPoint = Callable[[BenchmarkConfig], RunResult]


@dataclass
class SeriesRuns:
    """What a series measured: each point with its runs' report ids, and why it stopped early (if it did)."""

    points: list[PointPlan]
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)
    server_down: str | None = None
    results: list[RunResult] = field(default_factory=list)  # every run, in run order (failed ones too)


def closed_point(
    settings: Settings, base: BenchmarkConfig, users: int, kind: PointKind, label: str
) -> tuple[PointPlan, BenchmarkConfig]:
    """A closed-loop point with ``users`` concurrent users and the load processes for them."""
    plan = base.model_copy(update={
        "mode": "closed_loop", "concurrency": users, "workers": load_processes(settings, users, None, None),
        "rate_req_per_sec": None, "burstiness": None, "max_in_flight": None, "rate_end_req_per_sec": None,
    })
    return PointPlan(label=label, kind=kind, concurrency=users), plan


def rate_point(settings: Settings, base: BenchmarkConfig, rate: float) -> tuple[PointPlan, BenchmarkConfig]:
    """An open-loop point at ``rate`` req/s (at most MAX_IN_FLIGHT in flight) and the load processes for it."""
    max_in_flight = settings.max_in_flight
    plan = base.model_copy(update={
        "mode": "open_loop", "workers": load_processes(settings, base.concurrency, rate, max_in_flight),
        "rate_req_per_sec": rate, "burstiness": base.burstiness or settings.burstiness, "rate_end_req_per_sec": None,
        "max_in_flight": max_in_flight,
    })
    return PointPlan(label=f"rate {rate:g} req/s", kind="rate", rate_req_per_sec=rate), plan


def auto_rates(sync_req_per_sec: float, max_req_per_sec: float, count: int) -> list[float]:
    """``count`` rates evenly inside (sync, max) (either order), ascending, 3 significant digits, each once."""
    low, high = sorted((sync_req_per_sec, max_req_per_sec))
    rates = {float(f"{low + (high - low) * i / (count + 1):.3g}") for i in range(1, count + 1)}
    return sorted(r for r in rates if r > 0)


def planned_points(settings: Settings, base: BenchmarkConfig) -> list[tuple[PointPlan, BenchmarkConfig]]:
    """The points of an explicit SWEEP, or of a plain REPEAT (the one point of the settings)."""
    spec = settings.sweep_spec
    if spec is None:
        if base.rate_req_per_sec is not None:
            label = f"rate {base.rate_req_per_sec:g} req/s"
            if base.rate_end_req_per_sec is not None:
                label += f" -> {base.rate_end_req_per_sec:g} req/s"
            return [(PointPlan(label=label, kind="rate", rate_req_per_sec=base.rate_req_per_sec), base)]
        return [(PointPlan(label=f"concurrency {base.concurrency}", kind="concurrency", concurrency=base.concurrency),
                 base)]
    kind, loads = spec
    if kind == "concurrency":
        return [closed_point(settings, base, int(n), "concurrency", f"concurrency {int(n)}") for n in loads]
    if kind == "rate":
        return [rate_point(settings, base, rate) for rate in loads]
    maximum = f"maximum throughput (concurrency {base.concurrency})"
    return [closed_point(settings, base, 1, "synchronous", "synchronous"),
            closed_point(settings, base, base.concurrency, "throughput", maximum)]


def _mean_throughput(point: PointPlan, reports: dict[str, Report]) -> float:
    values = [report_values(reports[i])["throughput_req_per_sec"] or 0.0 for i in point.report_ids if i in reports]
    return sum(values) / len(values) if values else 0.0


def run_line(
    point: PointPlan, index: int, points: int, run: int, repeat: int, result: RunResult, tag: str = "[SWEEP]"
) -> str:
    """``[SWEEP] point 2/4 rate 1.5 req/s, run 1/3: 1.48 req/s, …, TTFT p99 300 ms, E2E p99 2100 ms (<report id>)``."""
    where = f"{tag} point {index}/{points} {point.label}, run {run}/{repeat}"
    if result.report is None:
        return f"{where}: no report ({result.error or 'nothing measured'})"
    m = result.report.metrics
    ttft = "n/a" if m.ttft.p99_ms is None else f"{m.ttft.p99_ms:.0f} ms"
    e2e = "n/a" if m.e2e.p99_ms is None else f"{m.e2e.p99_ms:.0f} ms"
    warning = disagreement(result.report)
    return (f"{where}: {m.throughput_req_per_sec:.2f} req/s, {m.output_tokens_per_sec:.0f} output tok/s, TTFT p99 "
            f"{ttft}, E2E p99 {e2e}, {m.requests_ok}/{m.requests_total} ok ({result.report.report_id})"
            + (f"; WARNING {warning}" if warning else ""))


def disagreement(report: Report) -> str | None:
    """``client and server disagree (…): …`` when the report's server cross-check failed; else None."""
    if report.server is None or not report.server.disagreements:
        return None
    return "client and server disagree (did other load reach the server?): " + "; ".join(report.server.disagreements)


def run_series(
    settings: Settings, base: BenchmarkConfig, run_point: RunPoint, out: Callable[[str], None] = print
) -> SeriesRuns:
    """Measure every point REPEAT times with ``run_point`` (a progress bar and run lines unless a single run)."""
    todo = planned_points(settings, base)
    single = settings.sweep_spec is None and settings.repeat == 1
    auto = settings.sweep_spec is not None and settings.sweep_spec[0] == "auto"
    total_points = len(todo) + (settings.sweep_rates if auto else 0)
    reports: dict[str, Report] = {}
    done: list[PointPlan] = []
    runs = SeriesRuns(points=done)
    first = True
    bar = tqdm(total=total_points * settings.repeat, desc="Series", unit="run", file=sys.stdout, position=0,
               disable=single)  # fmt: skip
    try:
        while todo:
            point, plan = todo.pop(0)
            for run in range(1, settings.repeat + 1):
                if not first and settings.cooldown_s:
                    time.sleep(settings.cooldown_s)
                result = run_point(plan if first else plan.model_copy(update={"warmup_requests": 0}))
                first = False
                bar.update(1)
                runs.results.append(result)
                if result.report is not None:
                    reports[result.report.report_id] = result.report
                    point.report_ids.append(result.report.report_id)
                    warning = disagreement(result.report)
                    if warning:
                        runs.notes.append(f"{point.label} run {run} ({result.report.report_id}): {warning}")
                else:
                    runs.notes.append(f"{point.label} run {run}: {result.error or 'no report'}")
                if not single:
                    tag = "[SWEEP]" if settings.sweep else "[REPEAT]"
                    out(run_line(point, len(done) + 1, total_points, run, settings.repeat, result, tag))
                if result.server_down:
                    runs.server_down = result.server_down
                    runs.notes.append(f"{point.label} run {run}: {result.server_down}; the series was ended early")
                if result.interrupted or result.server_down:
                    runs.interrupted = runs.interrupted or result.interrupted
                    break
            if point.report_ids:
                done.append(point)
            if runs.interrupted or runs.server_down:
                break
            if auto and point.kind == "throughput" and len(done) == 2:
                rates = auto_rates(_mean_throughput(done[0], reports), _mean_throughput(done[1], reports),
                                   settings.sweep_rates)
                listed = ", ".join(f"{r:g}" for r in rates)
                out(f"[SWEEP] rates between the synchronous and the maximum throughput: {listed} req/s")
                todo += [rate_point(settings, base, rate) for rate in rates]
                bar.total = (len(done) + len(todo)) * settings.repeat
    except KeyboardInterrupt:
        if single:  # no run between which to stop: as before any series, the command's own Ctrl-C handling
            raise
        runs.interrupted = True
        runs.notes.append("interrupted (Ctrl-C) between runs")
    finally:
        bar.close()
    if auto:  # load order: synchronous, the rates, maximum throughput
        done.sort(key=lambda p: {"synchronous": 0, "rate": 1, "throughput": 2}.get(p.kind, 1))
    return runs
