"""``make benchmark`` / ``./run_benchmark.sh``: warmup, a headless Locust run, then the sidecar writes the report.

``python -m loadgen.command.benchmark --concurrency 32 --duration 60`` — every knob is a flag (``--help`` lists them
with their
defaults and environment names) and an environment/``.env``/make variable; flags win. The benchmark computes the
run's metrics (:mod:`core.stats`) and hands the finished run to the sidecar (:mod:`core.api`), which adds
resources, log facts and the environment and writes the report. Rows are appended to
``logs/runs/<run id>.requests.jsonl`` as they come, so a crash of any part loses nothing: ``--report-from FILE``
builds the report from such a file later. ``--sweep`` / ``--repeat N`` run several load points or runs and have the
sidecar write a series report with confidence intervals and the SLO knee (:mod:`loadgen.orchestrate.sweep`).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path

from core.api import BuildReportRequest, BuildSeriesRequest
from core.cli import build_parser, parse
from core.clientview import client_view, load_calibration
from core.compare import unusable_reason
from core.enginestate import EngineControl
from core.errorsummary import error_summary
from core.gate import gate_verdict, series_gate_verdict
from core.intervals import Interval
from core.knobs.commands import BENCHMARK
from core.pipes import guard_stdout
from core.report_schema import BenchmarkConfig, Report
from core.schedule import requested_rate
from core.series import SeriesReport, is_series_id
from core.serverview import cross_check
from core.settings import Settings
from core.stats import measured_window_s, run_metrics
from engine.control import LocalEngine
from loadgen.command.baseline import moved_text
from loadgen.command.cioutput import report_result, series_result, write_ci_outputs
from loadgen.command.worker import worker_main
from loadgen.errors import BenchError, WarmupFailed, WorkersMissing
from loadgen.orchestrate import profiling
from loadgen.orchestrate.measured_run import Measured, from_records_file, run_measured
from loadgen.orchestrate.preflight import plan_problem, preflight
from loadgen.orchestrate.replica_watch import cluster_of
from loadgen.orchestrate.stack_lock import RunLock, StackBusy
from loadgen.orchestrate.sweep import RunPoint, RunResult, run_series
from loadgen.plan import bench_config, read_plan
from loadgen.sidecar_client import SidecarClient
from loadgen.sidecar_series_client import mark_series_baseline, post_series
from loadgen.terminal.series_summary import series_lines
from loadgen.terminal.summary import format_summary, start_line
from loadgen.workloads.dataset import DatasetError, load_dataset
from loadgen.workloads.prefixes import prefixes_file
from loadgen.workloads.randomdata import random_prompts_file

HELP = """Warmup, a measured Locust run, then the sidecar's report (reports/). Also python -m
loadgen.command.benchmark and
make benchmark VAR=VALUE; --sweep / --repeat N write a series report. Exit: 0 ok, 1 report not written, 2 bad input
or services down, 3 gate regression, 4 no success, 5 error rate, 6 server down, 130 interrupted."""


def build_request(plan: BenchmarkConfig, run: Measured, records_path: Path, settings: Settings) -> BuildReportRequest:
    """The finished run for the sidecar: rows, the metrics computed here, the server cross-check, the client view.

    Raises:
        ValueError: no measured row (nothing to report).
    """
    measured = [r for r in run.records if r.phase == "measured"]
    return BuildReportRequest(
        config=plan,
        records=run.records,
        metrics=run_metrics(run.records, plan.slo, requested_rate(plan.rate_req_per_sec, plan.rate_end_req_per_sec)),
        window_start=run.window_start,
        window_end=run.window_end,
        window_id=run.window_id,
        server=cross_check(
            run.before,
            run.after,
            measured,
            server_url=f"{len(run.replicas)} replicas summed" if run.replicas else plan.vllm_url,
            max_added_pct=settings.client_overhead_max_pct,
        )
        if run.before and run.after
        else None,
        cluster=cluster_of(run.replicas, measured, plan, settings.client_overhead_max_pct),
        client=client_view(
            measured,
            measured_window_s(measured),
            run.cpu_cores,
            load_calibration(settings.logs_dir / "calibration.json"),
            run.processes,
            plan.workers,
        ),
        run_id=records_path.name.removesuffix(".requests.jsonl"),
        profile_traces=run.traces,
        interrupted=run.interrupted,
        gaps=run.gaps,
        server_down=run.server_down.line() if run.server_down else None,
        errors=error_summary(run.records),
    )


# Exit codes (README "Exit codes"): CI scripts rely on them.
EXIT_OK = 0
EXIT_FAILED = 1  # the report could not be written (sidecar unreachable or refusing); rows are kept
EXIT_USAGE = 2  # bad input, services down, unknown or incomparable GATE baseline (nothing was measured)
EXIT_GATE = 3  # GATE: a regression against the named baseline
EXIT_NO_SUCCESS = 4  # no measured request succeeded (report written, never a reference), or every warmup request failed
EXIT_ERROR_RATE = 5  # error rate above MAX_ERROR_RATE_PCT
EXIT_SERVER_DOWN = 6  # vLLM stopped answering mid-run: ended early, the report of the rows so far is written
EXIT_INTERRUPTED = 130  # Ctrl-C, SIGTERM, SIGHUP (the report of the rows so far is written when there are any)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (CI cancellation, ``timeout``, ``docker stop``, systemd, a closed terminal) act as Ctrl-C
    while the block runs: the load stops, the report of the rows so far is written, exit 130. Only in the main
    thread (elsewhere signals cannot be handled); the previous handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.default_int_handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def server_down_line(what: str) -> str:
    """The line of a run ended early because vLLM stopped answering (``what``: :meth:`ServerDown.line`)."""
    return f"[ERROR] {what}; the run was ended early, report written with the failures counted"


def run_once(
    settings: Settings, plan: BenchmarkConfig, sidecar: SidecarClient, engine: EngineControl
) -> tuple[Measured, Path]:
    """Measure a new run into ``logs/runs/<YYYYMMDD_HHMMSS>.requests.jsonl``.

    Raises:
        profiling.ProfilingError: PROFILE=1 and the profiler failed.
    """
    run_dir = settings.logs_dir / "runs"
    run_dir.mkdir(parents=True, exist_ok=True)
    records_path = run_dir / f"{datetime.now().strftime('%Y%m%d_%H%M%S')}.requests.jsonl"
    records_path.touch()
    return run_measured(settings, plan, records_path, sidecar, engine), records_path


def verdicts(settings: Settings, report: Report) -> list[tuple[int, str]]:
    """``(exit code, line)`` of every check the run failed, most serious first (empty: exit 0)."""
    m = report.metrics
    out: list[tuple[int, str]] = []
    if m.requests_ok == 0:
        out.append(
            (EXIT_NO_SUCCESS, f"[ERROR] No measured request succeeded ({m.requests_failed} failed): see errors.")
        )
    if settings.gate:  # 3 on a regression, 2 when the baseline is unknown/incomparable
        verdict = gate_verdict(report, settings.gate, settings.gate_threshold_pct, settings.gate_error_rate_pp)
        if verdict.exit_code:
            out.append((verdict.exit_code, verdict.line))
        else:
            print(verdict.line)
    limit = settings.max_error_rate_pct
    if limit is not None and m.error_rate_percent > limit:
        out.append(
            (EXIT_ERROR_RATE, f"[ERROR] Error rate {m.error_rate_percent:.1f}% is above MAX_ERROR_RATE_PCT={limit:g}%")
        )
    return out


def main(argv: list[str] | None = None, engine: EngineControl | None = None) -> int:
    """Run a benchmark (or rebuild a report from a records file); returns the exit code (module constants).

    SIGTERM and SIGHUP are handled as Ctrl-C (:func:`stop_signals_interrupt`)."""
    guard_stdout()
    with stop_signals_interrupt():
        try:
            return _main(argv, engine)
        except KeyboardInterrupt:  # a second Ctrl-C, or one outside the measured window
            print("\n[INFO] Interrupted: no report written.", file=sys.stderr)
            return EXIT_INTERRUPTED


def parser() -> argparse.ArgumentParser:
    """The benchmark's command line: the knobs of its view (:data:`core.knobs.commands.BENCHMARK`, :mod:`core.cli`)
    plus ``--report-from``."""
    cli = build_parser("./run_benchmark.sh", HELP, BENCHMARK)
    output = next(group for group in cli._action_groups if group.title == "output")
    output.add_argument(
        "--report-from", type=Path, metavar="ROWS_FILE", help="build the report from an existing rows file instead"
    )
    return cli


def _main(argv: list[str] | None, engine: EngineControl | None) -> int:
    args, settings = parse(parser(), argv)
    if settings.worker:  # this host sends load for a benchmark elsewhere: no report, no lock here
        return worker_main(settings)
    for note in settings.ignored_knobs:
        print(f"[WARN] {note}", flush=True)
    sidecar = SidecarClient.of(settings)
    try:
        target = preflight(settings, sidecar)
        model = target.model
        dataset = None if settings.random_dataset else load_dataset(settings.workload_file)
    except (BenchError, DatasetError) as exc:
        print(f"[ERROR] {exc}", file=sys.stderr)
        return EXIT_USAGE
    if dataset is not None and dataset.skipped:
        print(f"[WARN] {dataset.skipped} unusable entr(y/ies) in {dataset.path} skipped; {len(dataset.prompts)} used")
    plan = bench_config(settings, model)
    if not args.report_from:
        try:
            refused = plan_problem(settings, sidecar, plan, target, dataset)
        except BenchError as exc:
            refused = f"[ERROR] {exc}"
        if refused:
            print(f"{refused}\n[ERROR] Nothing was sent.", file=sys.stderr)
            return EXIT_USAGE
    print(start_line(plan, target.backend), flush=True)
    if settings.random_dataset and not args.report_from:
        try:
            plan = with_random_prompts(settings, plan)
        except BenchError as exc:
            print(f"[ERROR] {exc}", file=sys.stderr)
            return EXIT_USAGE
    if plan.prefix_len_tokens and not args.report_from:
        try:
            path = prefixes_file(plan, settings.logs_dir, settings.prompts_file)
        except BenchError as exc:
            print(f"[ERROR] {exc}", file=sys.stderr)
            return EXIT_USAGE
        print(f"[INFO] {plan.prefix_count} shared prefix(es) of {plan.prefix_len_tokens} tokens in {path}")
        plan = plan.model_copy(update={"prefix_file": str(path)})
    with ExitStack() as held:
        if not args.report_from:  # one benchmark at a time per stack, held for the whole run or sweep
            try:
                held.enter_context(RunLock(settings.run_dir, settings.logs_dir / "runs"))
            except (StackBusy, OSError) as exc:
                print(f"[ERROR] {exc}", file=sys.stderr)
                return EXIT_USAGE
        return _measure_and_report(args, settings, plan, sidecar, engine)


def _measure_and_report(
    args: argparse.Namespace,
    settings: Settings,
    plan: BenchmarkConfig,
    sidecar: SidecarClient,
    engine: EngineControl | None,
) -> int:
    if not args.report_from and wants_series(settings, sidecar):
        return series_main(settings, plan, sidecar, engine or LocalEngine(settings))
    if args.report_from:
        records_path = args.report_from
        plan = plan_beside(records_path) or plan
        run = from_records_file(records_path)
    else:
        try:
            run, records_path = run_once(settings, plan, sidecar, engine or LocalEngine(settings))
        except profiling.ProfilingError as exc:
            print(f"[ERROR] {exc}", file=sys.stderr)
            return EXIT_USAGE
        except WarmupFailed as exc:
            print(f"[ERROR] {exc}", file=sys.stderr)
            return EXIT_NO_SUCCESS
        except WorkersMissing as exc:
            print(f"[ERROR] {exc}", file=sys.stderr)
            return EXIT_USAGE
    if not any(r.phase == "measured" and r.error_kind != "incomplete" for r in run.records):
        print(f"[ERROR] no measured request ended ({records_path}); nothing to report.", file=sys.stderr)
        return EXIT_INTERRUPTED if run.interrupted else EXIT_NO_SUCCESS
    try:
        built = sidecar.post_report(build_request(plan, run, records_path, settings), records_path)
    except BenchError as exc:
        print(
            f"[ERROR] {exc}\n[ERROR] Rows are kept in {records_path}; rebuild the report later with "
            f"`python -m loadgen.command.benchmark --report-from {records_path}`.",
            file=sys.stderr,
        )
        return EXIT_FAILED
    lines = format_summary(built.report, built.report_path)
    for line in lines[:-2]:
        print(line)
    if settings.baseline:
        print(mark_baseline(sidecar, settings.baseline, built.report))
    for line in lines[-2:]:  # the seed's closing lines stay last
        print(line)
    if run.interrupted:
        print(f"[INFO] Interrupted: report of the {built.report.metrics.requests_total} requests so far written.")
        return EXIT_INTERRUPTED
    if run.server_down:
        failed = [(EXIT_SERVER_DOWN, server_down_line(run.server_down.line()))]
    else:
        failed = verdicts(settings, built.report)
    for _, line in failed:
        print(line, file=sys.stderr)
    for line in write_ci_outputs(settings, report_result(settings, built.report, built.report_path, failed)):
        print(line)
    return failed[0][0] if failed else EXIT_OK


def with_random_prompts(settings: Settings, plan: BenchmarkConfig) -> BenchmarkConfig:
    """DATASET=random: the plan with its token-exact prompts generated (once) for the server's tokenizer.

    Raises:
        BenchError: the server cannot tokenize, or a prompt cannot be sized.
    """
    path = random_prompts_file(plan, settings.logs_dir, settings.prompts_file)
    print(f"[INFO] DATASET=random: {plan.input_len_tokens}-token prompts (chat template included) in {path}")
    return plan.model_copy(update={"dataset_file": str(path)})


def wants_series(settings: Settings, sidecar: SidecarClient) -> bool:
    """A sweep, repeated runs, or a GATE baseline that is a series (judged with intervals): a series run."""
    if settings.sweep or settings.repeat > 1:
        return True
    if not settings.gate:
        return False
    try:
        return is_series_id(sidecar.baselines().get(settings.gate, ""))
    except BenchError:
        return False


def point_runner(settings: Settings, sidecar: SidecarClient, engine: EngineControl) -> RunPoint:
    """One run of a series: measure ``plan`` and have the sidecar write its report (failures become values)."""

    def run_point(plan: BenchmarkConfig) -> RunResult:
        try:
            run, records_path = run_once(settings, plan, sidecar, engine)
        except (profiling.ProfilingError, WarmupFailed) as exc:
            return RunResult(None, error=str(exc))
        if not any(r.phase == "measured" and r.error_kind != "incomplete" for r in run.records):
            down = run.server_down.line() if run.server_down else None
            return RunResult(None, run.interrupted, f"no measured request ended ({records_path})", down)
        down = run.server_down.line() if run.server_down else None
        try:
            built = sidecar.post_report(build_request(plan, run, records_path, settings), records_path)
        except BenchError as exc:
            return RunResult(None, run.interrupted, f"{exc}; rows kept in {records_path} (--report-from)", down)
        return RunResult(built.report, run.interrupted, server_down=down)

    return run_point


def series_main(settings: Settings, plan: BenchmarkConfig, sidecar: SidecarClient, engine: EngineControl) -> int:
    """SWEEP / REPEAT: run the points, then the sidecar writes the series report; exit codes as a single run's."""
    runs = run_series(settings, plan, point_runner(settings, sidecar, engine))
    if not runs.points:
        print("[ERROR] no run of the series was reported: nothing to build a series from.", file=sys.stderr)
        if runs.server_down:
            print(f"[ERROR] {runs.server_down}; the series was ended early", file=sys.stderr)
            return EXIT_SERVER_DOWN
        return EXIT_INTERRUPTED if runs.interrupted else EXIT_NO_SUCCESS
    request = BuildSeriesRequest(
        config=plan,
        points=runs.points,
        sweep=settings.sweep,
        repeat=settings.repeat,
        slo_attainment_pct=settings.slo_attainment_pct,
        threshold_pct=settings.gate_threshold_pct,
        interrupted=runs.interrupted,
        notes=runs.notes,
    )
    try:
        built = post_series(sidecar, request)
    except BenchError as exc:
        written = ", ".join(i for p in runs.points for i in p.report_ids)
        print(f"[ERROR] {exc}\n[ERROR] The runs' own reports are written: {written}", file=sys.stderr)
        return EXIT_FAILED
    for line in series_lines(built.series, built.series_path):
        print(line)
    if settings.baseline:
        try:
            previous = mark_series_baseline(sidecar, settings.baseline, built.series.series_id)
            print(f"[BASELINE] {settings.baseline} -> {built.series.series_id}")
            moved = moved_text(settings.baseline, previous, built.series.series_id)
            if moved:
                print(moved)
        except BenchError as exc:
            print(f"[WARN] baseline {settings.baseline} not marked: {exc}")
    if runs.interrupted:
        print(f"[INFO] Interrupted: series of the {len(runs.points)} point(s) measured so far written.")
        return EXIT_INTERRUPTED
    if runs.server_down:
        print(f"[ERROR] {runs.server_down}; the series was ended early, the series of the points so far is written "
              "with the failures counted", file=sys.stderr)  # fmt: skip
        return EXIT_SERVER_DOWN
    failed = series_verdicts(settings, built.series)
    for _, line in failed:
        print(line, file=sys.stderr)
    for line in write_ci_outputs(settings, series_result(settings, built.series, built.series_path, failed)):
        print(line)
    return failed[0][0] if failed else EXIT_OK


def series_verdicts(settings: Settings, series: SeriesReport) -> list[tuple[int, str]]:
    """As :func:`verdicts` for a series: no success at any point, the GATE (with intervals), the error-rate limit."""
    out: list[tuple[int, str]] = []
    ok = [p for p in series.points if (p.metrics.get("throughput_req_per_sec") or Interval(n=0, mean=0)).mean > 0]
    if not ok:
        out.append((EXIT_NO_SUCCESS, "[ERROR] No measured request succeeded at any point of the series."))
    if settings.gate:
        verdict = series_gate_verdict(series, settings.gate, settings.gate_threshold_pct, settings.gate_error_rate_pp)
        if verdict.exit_code:
            out.append((verdict.exit_code, verdict.line))
        else:
            print(verdict.line)
    limit = settings.max_error_rate_pct
    for point in series.points:
        errors = point.metrics.get("error_rate_percent")
        if limit is not None and errors is not None and errors.mean > limit:
            out.append(
                (
                    EXIT_ERROR_RATE,
                    f"[ERROR] {point.label}: error rate {errors.mean:.1f}% is above MAX_ERROR_RATE_PCT={limit:g}%",
                )
            )
    return out


def mark_baseline(sidecar: SidecarClient, name: str, report: Report) -> str:
    """``--baseline NAME``: mark the new report as baseline ``name``; the line to print (an error does not fail the
    run: the report is written, ``make baseline NAME=`` can mark it later). A report that could never judge another
    (no successful request, interrupted: :func:`core.compare.unusable_reason`) is not marked, and the line says so."""
    report_id = report.report_id
    unusable = unusable_reason(report)
    if unusable:
        return f"[WARN] baseline {name} not marked: {unusable}; it could not judge any later run"
    try:
        marked = sidecar.mark_baseline(name, report_id)
    except BenchError as exc:
        return f"[WARN] baseline {name} not marked: {exc}"
    moved = moved_text(name, marked.previous_id, report_id)
    return f"[BASELINE] {name} -> {report_id}" + (f"\n{moved}" if moved else "")


def plan_beside(records_path: Path) -> BenchmarkConfig | None:
    """The run plan written next to a rows file (``<run id>.plan.json``); None when absent or unreadable."""
    try:
        return read_plan(records_path.with_name(records_path.name.replace(".requests.jsonl", ".plan.json")))
    except (OSError, ValueError):
        return None


if __name__ == "__main__":
    raise SystemExit(main())
