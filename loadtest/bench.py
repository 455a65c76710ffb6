"""``make benchmark``: warmup, a headless Locust run, then the sidecar writes the baseline report.

``python -m loadtest.bench`` reads CONCURRENCY, REQUESTS or DURATION, WARMUP, MAX_TOKENS, TEMPERATURE from the
settings object. Rows are appended to ``logs/runs/<run id>.requests.jsonl`` as they come, so a crash of any part
loses nothing: ``python -m loadtest.bench --report-from FILE`` builds the report from such a file later.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
import requests
from tqdm import tqdm

from core.clientview import client_view, load_calibration
from core.gate import EXIT_ERROR, gate_verdict
from core.records import RequestRecord
from core.report_schema import BenchmarkConfig, BuildReportRequest, BuildReportResponse
from core.serverview import Samples, cross_check, parse_exposition
from core.settings import PROJECT_ROOT, Settings, get_settings
from core.stats import measured_window_s
from loadtest import profiling
from loadtest.client import chat_payload, stream_chat
from loadtest.dataset import DatasetError, load_dataset
from loadtest.launch import locust_argv
from loadtest.procs import tree_cpu_s
from loadtest.summary import format_summary
from loadtest.workload import sampler_for


class BenchError(RuntimeError):
    """A benchmark cannot start or finish; the message says what to do."""


def preflight(settings: Settings) -> str:
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
    try:
        httpx.get(f"{settings.sidecar_url}/health", timeout=10).raise_for_status()
        baselines = httpx.get(f"{settings.sidecar_url}/baselines", timeout=10).json() if settings.gate else {}
    except (httpx.HTTPError, ValueError) as exc:
        raise BenchError(
            f"the sidecar is not answering at {settings.sidecar_url} ({type(exc).__name__}); it writes the report. "
            "Start the stack with `make up` (log: logs/sidecar.log)."
        ) from None
    if settings.gate and settings.gate not in baselines:
        known = ", ".join(sorted(baselines)) or "none yet"
        raise BenchError(
            f"GATE={settings.gate}: no baseline of that name (known: {known}). Mark one first with "
            f"`make baseline NAME={settings.gate}` after a benchmark of the same workload."
        )
    return str(models[0]["id"])


def read_records(path: Path) -> tuple[list[RequestRecord], int]:
    """Rows of a records file and the number of unreadable lines (a torn last line after a crash)."""
    records: list[RequestRecord] = []
    bad = 0
    if not path.exists():
        return records, bad
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            records.append(RequestRecord.model_validate_json(line))
        except ValueError:
            bad += 1
    return records, bad


def warmup(settings: Settings, model: str, records_path: Path) -> list[RequestRecord]:
    """Send ``WARMUP`` requests (same request function and workload), append them as ``warmup`` rows."""
    if settings.warmup == 0:
        return []
    sampler = sampler_for(settings, settings.seed + 1)
    items = [sampler.next() for _ in range(settings.warmup)]
    payloads = [chat_payload(model, i.prompt.messages, i.max_tokens, settings.temperature) for i in items]

    def one(payload: dict[str, object]) -> RequestRecord:
        with requests.Session() as session:
            return stream_chat(
                session, settings.vllm_url, payload, timeout_s=settings.request_timeout_s, phase="warmup"
            )

    with ThreadPoolExecutor(max_workers=min(settings.warmup, settings.concurrency)) as pool:
        done = list(pool.map(one, payloads))
    with records_path.open("a", encoding="utf-8") as fh:
        fh.writelines(r.model_dump_json() + "\n" for r in done)
    return done


def run_locust(settings: Settings, records_path: Path) -> tuple[int, float | None]:
    """Run Locust headless until REQUESTS are done or DURATION passed, with a progress bar.

    Locust's own output goes to ``<run id>.locust.log`` beside the records file.

    Returns:
        ``(exit code, CPU cores Locust used while requests completed)`` — None for runs shorter than 2 s of load.
    """
    argv = locust_argv(
        settings,
        headless=True,
        run_time_s=settings.duration,
        records_file=records_path,
        max_requests=settings.requests if settings.duration is None else None,
        stop_timeout_s=settings.request_timeout_s if settings.duration else None,
        user_class="OpenLoopUser" if settings.rate else "ChatUser",
    )
    total = settings.requests if settings.duration is None else None
    log_path = records_path.with_name(records_path.name.replace(".requests.jsonl", ".locust.log"))
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT)
    start = time.monotonic()
    # CPU is read between the first poll that sees a finished request and the last poll, so Locust's start-up
    # (imports, spawning) does not count as load.
    first: tuple[float, float] | None = None
    last: tuple[float, float] | None = None
    with tqdm(total=total, desc="Benchmark", unit="req", file=sys.stdout, dynamic_ncols=True) as bar:
        while proc.poll() is None:
            time.sleep(1.0)
            done = sum(1 for line in records_path.open(encoding="utf-8") if '"phase":"measured"' in line)
            cpu = tree_cpu_s(proc.pid)
            if cpu is not None and done:
                last = (time.monotonic(), cpu)
                first = first or last
            bar.update(done - bar.n)
            bar.set_postfix_str(f"{done / max(time.monotonic() - start, 1e-9):.2f} req/s")
    cores = None
    if first and last and last[0] - first[0] >= 2.0:
        cores = (last[1] - first[1]) / (last[0] - first[0])
    return proc.returncode, cores


def scrape_metrics(settings: Settings) -> Samples | None:
    """vLLM's ``/metrics`` parsed, or None when it cannot be read (the report then has no server view)."""
    try:
        response = httpx.get(f"{settings.vllm_url}/metrics", timeout=10)
        response.raise_for_status()
        return parse_exposition(response.text)
    except (httpx.HTTPError, ValueError):
        return None


def post_report(settings: Settings, request: BuildReportRequest) -> BuildReportResponse:
    """Ask the sidecar to write the report.

    Raises:
        BenchError: the sidecar failed or is unreachable.
    """
    try:
        response = httpx.post(
            f"{settings.sidecar_url}/reports",
            content=request.model_dump_json(),
            timeout=120,
            headers={"content-type": "application/json"},
        )
    except httpx.HTTPError as exc:
        raise BenchError(f"the sidecar is unreachable at {settings.sidecar_url}: {exc}") from None
    if response.status_code != 200:
        raise BenchError(f"the sidecar refused the report (HTTP {response.status_code}): {response.text[:500]}")
    return BuildReportResponse.model_validate_json(response.content)


def bench_config(settings: Settings, model: str) -> BenchmarkConfig:
    """The run's knobs, as recorded in the report."""
    workload = settings.workload_file.resolve()
    fixed = settings.fixed_max_tokens
    return BenchmarkConfig(
        mode="open_loop" if settings.rate else "closed_loop",
        concurrency=settings.concurrency,
        rate_req_per_sec=settings.rate,
        burstiness=settings.burstiness if settings.rate else None,
        requests=settings.requests if settings.duration is None else None,
        duration_s=settings.duration,
        warmup_requests=settings.warmup,
        ramp_up_s=settings.ramp_up_s or None,
        max_tokens=fixed or settings.output_len_cap,
        output_len_mean=None if fixed else settings.output_len_mean,
        ignore_eos=settings.ignore_eos,
        temperature=settings.temperature,
        dataset=str(workload.relative_to(PROJECT_ROOT)) if workload.is_relative_to(PROJECT_ROOT) else str(workload),
        input_mix=settings.input_mix,
        seed=settings.seed,
        slo=settings.slo,
        vllm_url=settings.vllm_url,
        model=model,
    )


@dataclass
class Measured:
    """What one run collected: rows, the measured window, /metrics scrapes, client CPU and profiler traces."""

    records: list[RequestRecord]
    window_start: float
    window_end: float
    before: Samples | None = None
    after: Samples | None = None
    cpu_cores: float | None = None
    traces: list[str] = field(default_factory=list)


def measure(settings: Settings, model: str, records_path: Path) -> Measured:
    """Warmup, then the measured window: Locust between two /metrics scrapes (under the profiler with PROFILE=1).

    Raises:
        profiling.ProfilingError: the profiler could not be started or stopped.
    """
    done = warmup(settings, model, records_path)
    failed = sum(not r.ok for r in done)
    print(f"[INFO] Warmup completed: {len(done)} requests" + (f" ({failed} failed)" if failed else ""))
    if settings.profile:
        profiling.start(settings)
    before = scrape_metrics(settings)
    window_start = time.time()
    code, cpu_cores = run_locust(settings, records_path)
    window_end = time.time()
    after = scrape_metrics(settings)
    traces: list[str] = []
    if settings.profile:
        profiling.stop(settings)
        traces = [str(p) for p in profiling.traces_since(settings.profile_dir, window_start - 5)]
        print(f"[INFO] Profiler wrote {len(traces)} trace file(s)")
    if code not in (0, 1):  # Locust exits 1 when any request failed; the report counts them by cause
        print(f"[WARN] Locust exited with code {code}; building the report from the rows collected.")
    records, bad = read_records(records_path)
    if bad:
        print(f"[WARN] {bad} unreadable row(s) in {records_path} skipped")
    return Measured(records, window_start, window_end, before, after, cpu_cores, traces)


def from_records_file(path: Path) -> Measured:
    """A finished run rebuilt from its rows file (no scrapes, no CPU figure)."""
    records, _ = read_records(path)
    start = min((r.started_at for r in records if r.phase == "measured"), default=time.time())
    end = max((r.ended_at for r in records), default=time.time())
    return Measured(records, start, end)


def run_measured(settings: Settings, model: str, records_path: Path) -> Measured:
    """:func:`measure`, with vLLM swapped to its profiling twin and back around it when PROFILE=1.

    Raises:
        profiling.ProfilingError: profiling was asked for and failed.
    """
    try:
        if settings.profile:
            profiling.enable(settings)
        return measure(settings, model, records_path)
    finally:
        if settings.profile:
            profiling.disable(settings)  # also after Ctrl-C or a failure half-way through the swap


def main(argv: list[str] | None = None) -> int:
    """Run a benchmark (or rebuild a report from a records file).

    Exit codes: 0 success, 1 failure (nothing measured, sidecar unreachable), 2 bad input or services down,
    3 GATE regression.
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--report-from", type=Path, help="build the report from an existing records file")
    args = parser.parse_args(argv)
    settings = get_settings()
    try:
        model = preflight(settings)
        dataset = load_dataset(settings.workload_file)
    except (BenchError, DatasetError) as exc:
        print(f"[ERROR] {exc}", file=sys.stderr)
        return 2
    if dataset.skipped:
        print(f"[WARN] {dataset.skipped} unusable entr(y/ies) in {dataset.path} skipped; {len(dataset.prompts)} used")
    if args.report_from:
        records_path = args.report_from
        run = from_records_file(records_path)
    else:
        run_dir = settings.logs_dir / "runs"
        run_dir.mkdir(parents=True, exist_ok=True)
        records_path = run_dir / f"{datetime.now().strftime('%Y%m%d_%H%M%S')}.requests.jsonl"
        records_path.touch()
        try:
            run = run_measured(settings, model, records_path)
        except profiling.ProfilingError as exc:
            print(f"[ERROR] {exc}", file=sys.stderr)
            return 2
    measured = [r for r in run.records if r.phase == "measured"]
    if not measured:
        print(f"[ERROR] no measured request was recorded ({records_path}); nothing to report.", file=sys.stderr)
        return 1
    request = BuildReportRequest(
        config=bench_config(settings, model),
        records=run.records,
        window_start=run.window_start,
        window_end=run.window_end,
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
    try:
        built = post_report(settings, request)
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
