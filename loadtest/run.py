"""One measured run: warmup, then Locust between two ``/metrics`` scrapes inside a sidecar sampling window
(under the profiler with PROFILE=1). Rows are appended to ``logs/runs/<run id>.requests.jsonl`` as they come."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import requests
from tqdm import tqdm

from core.engine import EngineControl
from core.records import RequestRecord
from core.report_schema import BenchmarkConfig
from core.serverview import Samples, parse_exposition
from core.settings import PROJECT_ROOT, Settings
from loadtest import profiling
from loadtest.client import stream_chat
from loadtest.driver import payload_for
from loadtest.launch import locust_argv
from loadtest.plan import sampler_for, write_plan
from loadtest.procs import tree_cpu_s
from loadtest.sidecar_api import SidecarClient


@dataclass
class Measured:
    """What one run collected: rows, the measured window, /metrics scrapes, client CPU, sampling window, traces."""

    records: list[RequestRecord]
    window_start: float
    window_end: float
    before: Samples | None = None
    after: Samples | None = None
    cpu_cores: float | None = None
    window_id: str | None = None
    traces: list[str] = field(default_factory=list)


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


def warmup(plan: BenchmarkConfig, records_path: Path) -> list[RequestRecord]:
    """Send the plan's warmup requests (same request function and workload), append them as ``warmup`` rows."""
    if plan.warmup_requests == 0:
        return []
    sampler = sampler_for(plan, plan.seed + 1)
    payloads = [payload_for(plan, sampler.next()) for _ in range(plan.warmup_requests)]

    def one(payload: dict[str, object]) -> RequestRecord:
        with requests.Session() as session:
            return stream_chat(session, plan.vllm_url, payload, timeout_s=plan.request_timeout_s, phase="warmup")

    with ThreadPoolExecutor(max_workers=min(plan.warmup_requests, plan.concurrency)) as pool:
        done = list(pool.map(one, payloads))
    with records_path.open("a", encoding="utf-8") as fh:
        fh.writelines(r.model_dump_json() + "\n" for r in done)
    return done


def run_locust(settings: Settings, plan: BenchmarkConfig, records_path: Path) -> tuple[int, float | None]:
    """Run Locust headless on ``plan`` until its requests are done or its duration passed, with a progress bar.

    The plan is written beside the rows (``<run id>.plan.json``) and named to Locust by ``LOCUST_PLAN_FILE``;
    Locust's own output goes to ``<run id>.locust.log``.

    Returns:
        ``(exit code, CPU cores Locust used while requests completed)`` — None for runs shorter than 2 s of load.
    """
    stem = records_path.name.removesuffix(".requests.jsonl")
    plan_path = records_path.with_name(f"{stem}.plan.json")
    write_plan(plan_path, plan)
    argv = locust_argv(
        settings,
        headless=True,
        users=plan.concurrency,
        ramp_up_s=plan.ramp_up_s or 0.0,
        host=plan.vllm_url,
        run_time_s=plan.duration_s,
        records_file=records_path,
        max_requests=plan.requests if plan.duration_s is None else None,
        stop_timeout_s=plan.request_timeout_s if plan.duration_s else None,
        user_class="OpenLoopUser" if plan.rate_req_per_sec else "ChatUser",
    )
    log_path = records_path.with_name(f"{stem}.locust.log")
    env = {**os.environ, "LOCUST_PLAN_FILE": str(plan_path)}
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    start = time.monotonic()
    # CPU is read between the first poll that sees a finished request and the last poll, so Locust's start-up
    # (imports, spawning) does not count as load.
    first: tuple[float, float] | None = None
    last: tuple[float, float] | None = None
    total = plan.requests if plan.duration_s is None else None
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


def scrape_metrics(vllm_url: str) -> Samples | None:
    """vLLM's ``/metrics`` parsed, or None when it cannot be read (the report then has no server view)."""
    try:
        response = httpx.get(f"{vllm_url}/metrics", timeout=10)
        response.raise_for_status()
        return parse_exposition(response.text)
    except (httpx.HTTPError, ValueError):
        return None


def measure(settings: Settings, plan: BenchmarkConfig, records_path: Path, sidecar: SidecarClient) -> Measured:
    """Warmup, then the measured window: Locust between two /metrics scrapes, inside a sidecar sampling window
    (under the profiler with PROFILE=1).

    Raises:
        profiling.ProfilingError: the profiler could not be started or stopped.
    """
    done = warmup(plan, records_path)
    failed = sum(not r.ok for r in done)
    print(f"[INFO] Warmup completed: {len(done)} requests" + (f" ({failed} failed)" if failed else ""))
    if settings.profile:
        profiling.start(settings)
    before = scrape_metrics(plan.vllm_url)
    window = sidecar.start_window()
    window_start = time.time()
    code, cpu_cores = run_locust(settings, plan, records_path)
    window_end = time.time()
    if window is not None:
        sidecar.stop_window(window.window_id)
    after = scrape_metrics(plan.vllm_url)
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
    return Measured(
        records, window_start, window_end, before, after, cpu_cores, window.window_id if window else None, traces
    )


def from_records_file(path: Path) -> Measured:
    """A finished run rebuilt from its rows file (no scrapes, no CPU figure)."""
    records, _ = read_records(path)
    start = min((r.started_at for r in records if r.phase == "measured"), default=time.time())
    end = max((r.ended_at for r in records), default=time.time())
    return Measured(records, start, end)


def run_measured(
    settings: Settings, plan: BenchmarkConfig, records_path: Path, sidecar: SidecarClient, engine: EngineControl
) -> Measured:
    """:func:`measure`, with vLLM restarted with its profiler and back around it when PROFILE=1.

    Raises:
        profiling.ProfilingError: profiling was asked for and failed.
    """
    try:
        if settings.profile:
            profiling.enable(settings, engine)
        return measure(settings, plan, records_path, sidecar)
    finally:
        if settings.profile:
            profiling.disable(settings, engine)  # also after Ctrl-C or a failure half-way through the restart
