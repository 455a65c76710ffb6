"""The benchmark's one pipeline: measure the plan's points (:func:`run_series`), have the sidecar write a report per
run and, for several runs or a series GATE, a series report; then :func:`loadgen.orchestrate.outcome.finish`.
``--report-from`` rebuilds one run's report from its rows file.

The loop over a series' runs (a single run is a series of one point): each load point REPEAT times, COOLDOWN_S
apart, the warmup once. ``SWEEP=auto`` (GuideLLM's sweep): one user, the closed loop at CONCURRENCY, then SWEEP_RATES
rates ``sync + (max − sync) · i / (N + 1)`` between their throughputs; ``SWEEP=concurrency:1,2,4`` /
``SWEEP=rate:0.5,1,2``: those loads. Ctrl-C stops after the run in progress.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from tqdm import tqdm

from core.api import (
    RUN_ID_RE,
    BuildReportRequest,
    BuildReportResponse,
    BuildSeriesRequest,
    BuildSeriesResponse,
    ServerFacts,
)
from core.clientview import client_lag_ms, client_view, load_calibration
from core.enginestate import EngineControl
from core.records import RequestRecord
from core.replicas import engine_url
from core.report_schema import BenchmarkConfig, Report, error_summary
from core.schedule import requested_rate
from core.series_stats import PointKind, PointPlan, is_series_id, report_values
from core.serverview import cross_check
from core.serverview_cluster import cluster_view
from core.settings import Settings
from core.stats import measured_window_s, run_metrics
from loadgen.errors import BenchError, OverCapacity, WarmupFailed, WarmupInterrupted, WorkersMissing
from loadgen.orchestrate.measured_run import Measured, from_records_file, run_measured
from loadgen.orchestrate.outcome import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NO_SUCCESS,
    EXIT_SERVER_DOWN,
    EXIT_USAGE,
    finish,
)
from loadgen.orchestrate.profiling import ProfilingError
from loadgen.orchestrate.replica_watch import EngineBusy
from loadgen.plan import jsonl_rows, load_processes, run_file, run_id_of
from loadgen.sidecar_client import SidecarClient, SidecarRefused
from loadgen.terminal.summary import report_line


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
    bar = tqdm(total=total_points * settings.repeat, desc="Series", unit="run", file=sys.stdout, position=0,
               disable=single)  # fmt: skip
    try:
        while todo:
            point, plan = todo.pop(0)
            for run in range(1, settings.repeat + 1):
                if runs.results and settings.cooldown_s:  # between runs; only the first run has the warmup
                    time.sleep(settings.cooldown_s)
                result = run_point(plan.model_copy(update={"warmup_requests": 0}) if runs.results else plan)
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


def build_request(
    plan: BenchmarkConfig, run: Measured, records_path: Path, settings: Settings, facts: ServerFacts | None = None
) -> BuildReportRequest:
    """The finished run for the sidecar (which reads its rows from ``records_path``), with vLLM's ``facts``."""
    measured = [r for r in run.records if r.phase == "measured"]
    errors = error_summary(run.records, "measured" if measured else "warmup")  # only a warmup: why it failed
    lag_ms = client_lag_ms(run.processes)
    return BuildReportRequest(
        config=plan, run_id=run_id_of(records_path), server_facts=facts, errors=errors,
        metrics=run_metrics(run.records, plan.slo, requested_rate(plan.rate_req_per_sec, plan.rate_end_req_per_sec)),
        window_start=run.window_start, window_end=run.window_end, window_id=run.window_id,
        server=cross_check(
            run.before, run.after, measured,
            # the engine whose /metrics were read: behind the stack's front, the engine itself, not the router
            server_url=f"{len(run.replicas)} replicas summed" if run.replicas else engine_url(settings),
            max_added_pct=settings.client_overhead_max_pct, client_lag_ms=lag_ms,
        ) if run.before and run.after else None,
        cluster=cluster_view(  # with the router: the per-replica view
            run.replicas, measured, router_policy=plan.router_policy, router_version=plan.router_version,
            max_added_pct=settings.client_overhead_max_pct, client_lag_ms=lag_ms,
        ) if run.replicas else None,
        client=client_view(measured, measured_window_s(measured), run.cpu_cores,
                           load_calibration(settings.logs_dir / "calibration.json"), run.processes, plan.workers),
        profile_traces=run.traces, interrupted=run.interrupted, gaps=run.gaps, engine_switch=run.engine_switch,
        server_down=run.server_down.line() if run.server_down else None,
    )


def new_records_path(settings: Settings) -> Path:
    """A new run's rows file, ``logs/runs/<YYYYMMDD_HHMMSS>.requests.jsonl`` (created empty)."""
    run_dir = settings.logs_dir / "runs"
    run_dir.mkdir(parents=True, exist_ok=True)
    records_path = run_dir / f"{datetime.now().strftime('%Y%m%d_%H%M%S')}.requests.jsonl"
    records_path.touch()
    return records_path


def report_run(
    settings: Settings, plan: BenchmarkConfig, sidecar: SidecarClient, run: Measured, records_path: Path,
    facts: ServerFacts | None = None,
) -> RunResult:  # fmt: skip
    """Have the sidecar write the report of one run, whatever it collected (ended, cut or only warmup requests);
    failures (nothing sent, the sidecar refused or unreachable) are values naming the rows file."""
    down = run.server_down.line() if run.server_down else None
    if not run.records:
        why = f"no request was sent ({records_path} is empty); nothing to report."
        return RunResult(None, run.interrupted, why, down, empty=True)
    try:
        built = sidecar.post("/reports", build_request(plan, run, records_path, settings, facts), BuildReportResponse)
    except BenchError as exc:
        why = (f"{exc}\n[ERROR] Rows are kept in {records_path}; rebuild the report later with "
               f"`python -m loadgen.command.benchmark --report-from {records_path}`.")
        return RunResult(None, run.interrupted, why, down)
    return RunResult(built.report, run.interrupted, server_down=down, path=built.report_path)


def point_runner(
    settings: Settings, sidecar: SidecarClient, engine: EngineControl, facts: ServerFacts | None = None
) -> RunPoint:
    """One run of the plan: measure ``plan`` and have the sidecar write its report (failures become values)."""

    def run_point(plan: BenchmarkConfig) -> RunResult:
        records_path = new_records_path(settings)
        try:
            run = run_measured(settings, plan, records_path, sidecar, engine)
        except (ProfilingError, WorkersMissing, EngineBusy, SidecarRefused) as exc:
            return RunResult(None, error=str(exc), exit_code=EXIT_USAGE)
        except (OverCapacity, WarmupFailed) as exc:  # the warmup's report, then the refusal (exit 2 or 4, not a point)
            warmup_report(settings, plan, sidecar, records_path, str(exc), facts=facts)
            code = EXIT_USAGE if isinstance(exc, OverCapacity) else EXIT_NO_SUCCESS
            return RunResult(None, error=str(exc), exit_code=code)
        except WarmupInterrupted as exc:
            return warmup_report(settings, plan, sidecar, records_path, str(exc), interrupted=True, facts=facts)
        return report_run(settings, plan, sidecar, run, records_path, facts)

    return run_point


def warmup_report(
    settings: Settings, plan: BenchmarkConfig, sidecar: SidecarClient, records_path: Path, why: str,
    interrupted: bool = False, facts: ServerFacts | None = None,
) -> RunResult:  # fmt: skip
    """The report of a run that sent only its warmup (all failed, or Ctrl-C), ``why`` as a gap; without
    ``interrupted`` its ``[REPORT]`` line is printed here (the run's result stays its error and exit code)."""
    gaps = [f"{why.rstrip('.')} (the errors are the warmup's)"]
    run = replace(from_records_file(records_path), interrupted=interrupted, gaps=gaps)
    done = report_run(settings, plan, sidecar, run, records_path, facts)
    if done.report is not None and not interrupted:
        print(report_line(done.report, done.path), flush=True)
    elif done.report is None:
        print(f"[WARN] no report of the warmup: {done.error}", file=sys.stderr)
    return done


def wants_series(settings: Settings, sidecar: SidecarClient) -> bool:
    """Whether the runs get a series report: several runs, or a GATE baseline that is a series."""
    if settings.sweep or settings.repeat > 1:
        return True
    if not settings.gate:
        return False
    try:
        return is_series_id(sidecar.baselines().get(settings.gate, ""))
    except BenchError:
        return False


def rows_file_problem(path: Path, runs_dir: Path) -> str | None:
    """Why ``path`` is no run's rows file to report from (None when it is): missing, not in ``runs_dir`` (where the
    sidecar reads it), unreadable, or no line of it a request row. Reads up to the first row only."""
    if not path.is_file():
        return "no such file; give a run's rows file (logs/runs/<run id>.requests.jsonl)"
    if path.resolve().parent != runs_dir.resolve() or not RUN_ID_RE.fullmatch(run_id_of(path)):
        return (f"the sidecar reads a run's rows from {runs_dir}/<YYYYMMDD_HHMMSS>.requests.jsonl: copy the file "
                "there under such a name")
    bad = 0
    try:
        for row in jsonl_rows(path, RequestRecord):
            if row is not None:
                return None
            bad += 1
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot be read ({type(exc).__name__}: {exc})"
    if bad:
        return f"not a run's rows file ({bad} line(s), none a request row); give logs/runs/<run id>.requests.jsonl"
    return "holds no request row: nothing to report"


def run_benchmark(
    settings: Settings, plan: BenchmarkConfig, sidecar: SidecarClient, engine: EngineControl,
    report_from: Path | None = None, facts: ServerFacts | None = None,
) -> int:  # fmt: skip
    """Measure the plan's points (or rebuild ``report_from``'s report) and report them; the exit code."""
    if report_from is not None:
        with suppress(OSError, ValueError):  # the run's plan, written beside its rows file (absent: the settings')
            plan = BenchmarkConfig.model_validate_json(run_file(report_from, ".plan.json").read_bytes())
        return finish_run(settings, sidecar, report_run(settings, plan, sidecar, from_records_file(report_from),
                                                        report_from, facts))  # fmt: skip
    runs = run_series(settings, plan, point_runner(settings, sidecar, engine, facts))
    if len(runs.results) == 1 and not wants_series(settings, sidecar):
        return finish_run(settings, sidecar, runs.results[0])
    return report_series(settings, plan, sidecar, runs)


def finish_run(settings: Settings, sidecar: SidecarClient, done: RunResult) -> int:
    """The end of a series of one run: its report is the result; with none, why and its exit code (2: profiler or
    load workers, 4: nothing sent, 130: stopped before any request, 1: the sidecar did not write it)."""
    if done.report is None:
        print(f"[ERROR] {done.error}", file=sys.stderr)
        if done.exit_code is not None:
            return done.exit_code
        if done.empty:
            return EXIT_INTERRUPTED if done.interrupted else EXIT_NO_SUCCESS
        return EXIT_FAILED
    return finish(settings, sidecar, done.report, done.path, done.interrupted, done.server_down)


def report_series(settings: Settings, plan: BenchmarkConfig, sidecar: SidecarClient, runs: SeriesRuns) -> int:
    """SWEEP / REPEAT (or a series GATE): the sidecar writes the series report over the runs'; the exit code."""
    if not runs.points:
        print("[ERROR] no run of the series was reported: nothing to build a series from.", file=sys.stderr)
        for note in runs.notes:  # why each run failed
            print(f"[ERROR] {note}", file=sys.stderr)
        if runs.server_down:
            print(f"[ERROR] {runs.server_down}; the series was ended early", file=sys.stderr)
            return EXIT_SERVER_DOWN
        codes = {r.exit_code for r in runs.results}
        if codes == {EXIT_USAGE}:  # the profiler or the load workers failed every run: a setup to mend, not a result
            return EXIT_USAGE
        return EXIT_INTERRUPTED if runs.interrupted else EXIT_NO_SUCCESS
    request = BuildSeriesRequest(
        config=plan, points=runs.points, sweep=settings.sweep, repeat=settings.repeat, notes=runs.notes,
        slo_attainment_pct=settings.slo_attainment_pct, threshold_pct=settings.gate_threshold_pct,
        interrupted=runs.interrupted,
    )
    try:
        built = sidecar.post("/series", request, BuildSeriesResponse)
    except BenchError as exc:
        written = ", ".join(i for p in runs.points for i in p.report_ids)
        print(f"[ERROR] {exc}\n[ERROR] The runs' own reports are written: {written}", file=sys.stderr)
        return EXIT_FAILED
    return finish(settings, sidecar, built.series, built.series_path, runs.interrupted, runs.server_down)
