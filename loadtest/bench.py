"""``make benchmark``: warmup, a headless Locust run, then the sidecar writes the baseline report.

``python -m loadtest.bench`` reads CONCURRENCY, REQUESTS or DURATION, WARMUP, MAX_TOKENS, TEMPERATURE ... from the
settings object. The benchmark computes the run's metrics (:mod:`core.stats`) and hands the finished run to the
sidecar (:mod:`core.api`), which adds resources, log facts and the environment and writes the report. Rows are
appended to ``logs/runs/<run id>.requests.jsonl`` as they come, so a crash of any part loses nothing:
``python -m loadtest.bench --report-from FILE`` builds the report from such a file later.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from pathlib import Path

import httpx

from core.api import BuildReportRequest
from core.clientview import client_view, load_calibration
from core.engine import EngineControl
from core.gate import EXIT_ERROR, gate_verdict
from core.report_schema import BenchmarkConfig
from core.serverview import cross_check
from core.settings import Settings, get_settings
from core.stats import measured_window_s, run_metrics
from loadtest import profiling
from loadtest.dataset import DatasetError, load_dataset
from loadtest.errors import BenchError
from loadtest.plan import bench_config
from loadtest.run import Measured, from_records_file, run_measured
from loadtest.sidecar_api import SidecarClient
from loadtest.summary import format_summary
from services.vllm.control import LocalEngine


def preflight(settings: Settings, sidecar: SidecarClient) -> str:
    """Check vLLM and the sidecar answer; return the served model id.

    Raises:
        BenchError: either service is down or vLLM is still loading.
    """
    error: Exception | None = None
    for attempt in range(3):  # a busy server can drop a connection; retry before calling it down
        try:
            health = httpx.get(f"{settings.vllm_url}/health", timeout=10)
            models = httpx.get(f"{settings.vllm_url}/v1/models", timeout=10).json()["data"]
            break
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            error = exc
            time.sleep(1.0 + attempt)
    else:
        raise BenchError(
            f"vLLM is not answering at {settings.vllm_url} ({type(error).__name__}). Start the stack with `make up` "
            f"and check {settings.vllm_log_file}."
        ) from None
    if health.status_code != 200 or not models:
        raise BenchError(f"vLLM at {settings.vllm_url} is not ready (HTTP {health.status_code}); wait or see logs.")
    sidecar.check()
    if settings.gate:
        baselines = sidecar.baselines()
        if settings.gate not in baselines:
            known = ", ".join(sorted(baselines)) or "none yet"
            raise BenchError(
                f"GATE={settings.gate}: no baseline of that name (known: {known}). Mark one first with "
                f"`make baseline NAME={settings.gate}` after a benchmark of the same workload."
            )
    return str(models[0]["id"])


def build_request(plan: BenchmarkConfig, run: Measured, records_path: Path, settings: Settings) -> BuildReportRequest:
    """The finished run for the sidecar: rows, the metrics computed here, the server cross-check, the client view.

    Raises:
        ValueError: no measured row (nothing to report).
    """
    measured = [r for r in run.records if r.phase == "measured"]
    return BuildReportRequest(
        config=plan,
        records=run.records,
        metrics=run_metrics(run.records, plan.slo),
        window_start=run.window_start,
        window_end=run.window_end,
        window_id=run.window_id,
        server=cross_check(run.before, run.after, measured) if run.before and run.after else None,
        client=client_view(
            measured,
            measured_window_s(measured),
            run.cpu_cores,
            load_calibration(settings.logs_dir / "calibration.json"),
        ),
        run_id=records_path.name.removesuffix(".requests.jsonl"),
        profile_traces=run.traces,
    )


def main(argv: list[str] | None = None, engine: EngineControl | None = None) -> int:
    """Run a benchmark (or rebuild a report from a records file).

    Exit codes: 0 success, 1 failure (nothing measured, sidecar unreachable), 2 bad input or services down,
    3 GATE regression.
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--report-from", type=Path, help="build the report from an existing records file")
    args = parser.parse_args(argv)
    settings = get_settings()
    sidecar = SidecarClient(settings.sidecar_url)
    try:
        model = preflight(settings, sidecar)
        dataset = load_dataset(settings.workload_file)
    except (BenchError, DatasetError) as exc:
        print(f"[ERROR] {exc}", file=sys.stderr)
        return 2
    if dataset.skipped:
        print(f"[WARN] {dataset.skipped} unusable entr(y/ies) in {dataset.path} skipped; {len(dataset.prompts)} used")
    plan = bench_config(settings, model)
    if args.report_from:
        records_path = args.report_from
        run = from_records_file(records_path)
    else:
        run_dir = settings.logs_dir / "runs"
        run_dir.mkdir(parents=True, exist_ok=True)
        records_path = run_dir / f"{datetime.now().strftime('%Y%m%d_%H%M%S')}.requests.jsonl"
        records_path.touch()
        try:
            run = run_measured(settings, plan, records_path, sidecar, engine or LocalEngine(settings))
        except profiling.ProfilingError as exc:
            print(f"[ERROR] {exc}", file=sys.stderr)
            return 2
    if not any(r.phase == "measured" for r in run.records):
        print(f"[ERROR] no measured request was recorded ({records_path}); nothing to report.", file=sys.stderr)
        return 1
    try:
        built = sidecar.post_report(build_request(plan, run, records_path, settings))
    except BenchError as exc:
        print(
            f"[ERROR] {exc}\n[ERROR] Rows are kept in {records_path}; rebuild the report later with "
            f"`python -m loadtest.bench --report-from {records_path}`.",
            file=sys.stderr,
        )
        return 1
    for line in format_summary(built.report, built.report_path):
        print(line)
    if settings.gate:  # make benchmark GATE=v0.2.1: 3 on a regression, 2 when the baseline is unknown/incomparable
        verdict = gate_verdict(built.report, settings.gate, settings.gate_threshold_pct)
        print(verdict.line, file=sys.stderr if verdict.exit_code == EXIT_ERROR else sys.stdout)
        return verdict.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
