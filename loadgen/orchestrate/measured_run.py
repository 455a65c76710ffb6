"""One measured run: warmup, then Locust between two ``/metrics`` scrapes inside a sidecar sampling window
(under the profiler with PROFILE=1). Rows are appended to ``logs/runs/<run id>.requests.jsonl`` as they come."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from core.clientview import ProcessLoad
from core.enginestate import EngineControl
from core.errorsummary import causes_text, error_summary
from core.records import RequestRecord
from core.report_schema import BenchmarkConfig
from core.serverview import Samples
from core.serverview_cluster import ReplicaScrapes
from core.settings import PROJECT_ROOT, Settings, service_env
from loadgen.childprocs import kill_group, lifetime_bound, tree_cpu_s
from loadgen.errors import WarmupFailed, WorkersMissing
from loadgen.locust_side.user_actions import payload_for
from loadgen.orchestrate import profiling
from loadgen.orchestrate.breaker import RowWatch, ServerDown, ServerDownBreaker
from loadgen.orchestrate.locust_launch import local_master_address, locust_argv, worker_argv
from loadgen.orchestrate.replica_watch import ReplicaWatch, scrape_metrics
from loadgen.plan import sampler_for, write_plan
from loadgen.request.client import new_session, stream_chat
from loadgen.sidecar_client import SidecarClient
from loadgen.terminal.summary import load_line

tqdm.monitor_interval = 0  # no monitor thread: Ctrl-C must not print its traceback
INTERRUPTED = "interrupted (Ctrl-C, SIGTERM or SIGHUP)"
SERVER_DOWN = "server down"


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
    interrupted: bool = False  # Ctrl-C, SIGTERM, SIGHUP; a watchdog stop is a gap, not an interruption
    server_down: ServerDown | None = None  # vLLM stopped answering: the run was ended early
    gaps: list[str] = field(default_factory=list)
    processes: list[ProcessLoad] = field(default_factory=list)
    replicas: list[ReplicaScrapes] | None = None  # with the router: each engine's scrapes (replica_watch)


@dataclass
class LocustOutcome:
    """How the Locust processes ended: exit code, CPU cores they used while requests completed (None for runs shorter
    than 2 s of load), why the run was stopped early (None when it ended as planned), and each load process's own
    CPU and event-loop lag."""

    code: int | None
    cpu_cores: float | None
    stopped: str | None = None
    processes: list[ProcessLoad] = field(default_factory=list)
    server_down: ServerDown | None = None


def read_process_loads(path: Path) -> list[ProcessLoad]:
    """The load processes' reports (``--client-file``); unreadable lines are skipped."""
    out: list[ProcessLoad] = []
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(ProcessLoad.model_validate_json(line))
        except ValueError:
            continue
    return sorted(out, key=lambda p: p.slot)


def read_records(path: Path) -> tuple[list[RequestRecord], int]:
    """Rows of a records file and the number of unreadable lines (a torn last line after a crash)."""
    records: list[RequestRecord] = []
    bad = 0
    if not path.exists():
        return records, bad
    with path.open(encoding="utf-8") as fh:  # line by line: a long run's file can be hundreds of MB
        for line in fh:
            if not line.strip():
                continue
            try:
                records.append(RequestRecord.model_validate_json(line))
            except ValueError:
                bad += 1
    return records, bad


def warmup(
    plan: BenchmarkConfig, records_path: Path, headers: dict[str, str] | None = None
) -> list[RequestRecord]:
    """Send the plan's warmup requests (same request function and workload, ``headers`` carrying the API key),
    append them as ``warmup`` rows.

    Daemon threads, at most CONCURRENCY at once: Ctrl-C during the warmup ends the process without waiting for
    them (their connections close, so the server drops the requests).
    """
    if plan.warmup_requests == 0:
        return []
    sampler = sampler_for(plan, plan.seed + 1)
    payloads = queue.SimpleQueue[dict[str, object]]()
    for _ in range(plan.warmup_requests):
        payloads.put(payload_for(plan, sampler.next()))
    done: list[RequestRecord] = []

    def worker() -> None:
        session = new_session(headers=headers)
        try:
            while True:
                try:
                    payload = payloads.get_nowait()
                except queue.Empty:
                    return
                done.append(
                    stream_chat(session, plan.vllm_url, payload, timeout_s=plan.request_timeout_s, phase="warmup")
                )
        finally:
            session.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(plan.warmup_requests, plan.concurrency))]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.2)  # short joins: Ctrl-C reaches the main thread
    with records_path.open("a", encoding="utf-8") as fh:
        fh.writelines(r.model_dump_json() + "\n" for r in done)
    return done


def warmup_failure(done: list[RequestRecord]) -> str:
    """Why every warmup request failed, in the server's words: ``every warmup request failed (10 of 10): http_status
    10 (max_tokens=99999 cannot be greater than max_model_len=4096)``."""
    return (
        f"every warmup request failed ({len(done)} of {len(done)}): {causes_text(error_summary(done, 'warmup'))}. "
        "The measured run was not started: it would fail the same way."
    )


RowCounter = RowWatch  # the name earlier code and tests use


def stop_locust(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """Ask Locust to stop (SIGINT: it cancels the requests in flight, whose rows say ``incomplete``; a master stops
    its workers), then kill its whole process group after ``grace_s`` s; any load process left is killed too."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        proc.wait()
    kill_group(proc.pid)  # workers that outlived their master


def worker_hint(settings: Settings) -> str:
    """How to start a remote worker of this benchmark."""
    return (f"On each load host run: SIDECAR_TOKEN=<this stack's token> ./run_benchmark.sh --worker --master-host "
            f"<this host's address> --master-port {settings.master_port}")


def waiting_line(settings: Settings, plan: BenchmarkConfig) -> str:
    """The line a benchmark with EXPECT_WORKERS prints while its master waits."""
    return (f"[INFO] Waiting up to {settings.expect_workers_timeout_s:.0f} s for {plan.remote_workers} remote load "
            f"worker(s) on {settings.master_bind_host}:{settings.master_port}. {worker_hint(settings)}")


def _quits(proc: subprocess.Popen[bytes]) -> bool:
    """Whether a local worker ends by itself within 5 s (its master told it to quit)."""
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return False
    return True


def workers_missing(log_path: Path) -> str | None:
    """Why the master gave up (its line in the Locust log), or None."""
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if "Gave up waiting for workers" in line or "load workers joined within" in line:
            return line.split("] ", 1)[-1].strip()
    return None


def run_locust(settings: Settings, plan: BenchmarkConfig, records_path: Path) -> LocustOutcome:
    """Run Locust headless on ``plan`` until its requests are done or its duration passed, with a progress bar.

    The plan is written beside the rows (``<run id>.plan.json``) and named to Locust by ``LOCUST_PLAN_FILE``;
    Locust's own output goes to ``<run id>.locust.log``. A watchdog stops a run in which no request finishes for
    WATCHDOG_S (default REQUEST_TIMEOUT_S + 60 s); Ctrl-C stops it too. Either way the rows so far are kept.
    """
    stem = records_path.name.removesuffix(".requests.jsonl")
    plan_path = records_path.with_name(f"{stem}.plan.json")
    client_path = records_path.with_name(f"{stem}.client.jsonl")
    write_plan(plan_path, plan, settings)  # the Locust processes read their settings from it
    open_loop = plan.rate_req_per_sec is not None
    argv = locust_argv(
        settings,
        headless=True,
        users=plan.concurrency,
        ramp_up_s=plan.ramp_up_s or 0.0,
        host=plan.vllm_url,
        # the open-loop dispatcher stops at DURATION and drains by itself; closed-loop users stop at --run-time
        run_time_s=None if open_loop else plan.duration_s,
        records_file=records_path,
        max_requests=plan.requests if plan.duration_s is None else None,
        stop_timeout_s=plan.drain_s if plan.duration_s and not open_loop else None,
        user_class="OpenLoopUser" if open_loop else "ChatUser",
        workers=plan.workers,
        client_file=client_path,
        remote_workers=plan.remote_workers,
    )
    log_path = records_path.with_name(f"{stem}.locust.log")
    env = {**service_env("locust"), "LOCUST_PLAN_FILE": str(plan_path)}
    with log_path.open("w") as log:
        # its own process group (killed whole at the end) and bound to this process's life (Linux: PDEATHSIG), so
        # no load process outlives the benchmark, even one killed with SIGKILL
        proc = subprocess.Popen(
            argv, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            preexec_fn=lifetime_bound(os.getpid()),
        )
        local_workers: list[subprocess.Popen[bytes]] = []
        if plan.remote_workers:  # this host's own workers join like the remote ones (each its own group, killed too)
            print(waiting_line(settings, plan), flush=True)
            worker = worker_argv(settings, local_master_address(settings), argv[-1])
            local_workers = [
                subprocess.Popen(worker, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True, preexec_fn=lifetime_bound(os.getpid()))
                for _ in range(plan.workers)
            ]  # fmt: skip
    watchdog_s = settings.watchdog_s or plan.request_timeout_s + 60.0
    start = last_progress = time.monotonic()
    # CPU is read between the first poll that sees a finished request and the last poll, so Locust's start-up
    # (imports, spawning) does not count as load.
    first: tuple[float, float] | None = None
    last: tuple[float, float] | None = None
    stopped: str | None = None
    count_measured = RowWatch(records_path, ServerDownBreaker(settings.server_down_s))
    total = plan.requests if plan.duration_s is None else None
    with tqdm(total=total, desc="Benchmark", unit="req", file=sys.stdout, dynamic_ncols=True) as bar:
        try:
            while proc.poll() is None:
                time.sleep(1.0)
                done = count_measured()
                now = time.monotonic()
                cpu = tree_cpu_s(proc.pid)
                if cpu is not None and done:
                    last = (now, cpu)
                    first = first or last
                if count_measured.down is not None:
                    stopped = SERVER_DOWN
                    print(f"\n[ERROR] {count_measured.down.line()}; ending the run early.", flush=True)
                    stop_locust(proc, 10.0)
                    break
                if done > bar.n:
                    last_progress = now
                elif now - last_progress > watchdog_s:
                    stopped = f"watchdog: no request finished for {watchdog_s:.0f} s (WATCHDOG_S)"
                    print(f"\n[ERROR] {stopped}; stopping the run, the rows so far are kept.", flush=True)
                    stop_locust(proc, plan.drain_s + 10.0)
                    break
                bar.update(done - bar.n)
                bar.set_postfix_str(f"{done / max(now - start, 1e-9):.2f} req/s")
        except KeyboardInterrupt:
            stopped = INTERRUPTED
            print(
                "\n[INFO] Stopping: requests in flight are cancelled and a report of the rows so far is written "
                "(Ctrl-C again to quit without one).",
                flush=True,
            )
            stop_locust(proc, plan.drain_s + 10.0)
        finally:
            if proc.poll() is None:  # an exception on the way out (a second Ctrl-C): no load process is left behind
                kill_group(proc.pid)
                proc.wait()
            kill_group(proc.pid)
            for local in local_workers:
                if local.poll() is None:
                    _quits(local)
                kill_group(local.pid)
                local.wait()
    missing = workers_missing(log_path) if plan.remote_workers and not count_measured() else None
    if missing:
        raise WorkersMissing(f"{missing}: {plan.workers} local + {plan.remote_workers} remote load worker(s) were "
                             f"expected within {settings.expect_workers_timeout_s:.0f} s (EXPECT_WORKERS_TIMEOUT_S); "
                             f"nothing was measured. {worker_hint(settings)}")  # fmt: skip
    cores = None
    if first and last and last[0] - first[0] >= 2.0:
        cores = (last[1] - first[1]) / (last[0] - first[0])
    return LocustOutcome(proc.returncode, cores, stopped, read_process_loads(client_path), count_measured.down)


def measure(settings: Settings, plan: BenchmarkConfig, records_path: Path, sidecar: SidecarClient) -> Measured:
    """Warmup, then the measured window: Locust between two /metrics scrapes, inside a sidecar sampling window
    (under the profiler with PROFILE=1).

    Raises:
        profiling.ProfilingError: the profiler could not be started or stopped.
        WarmupFailed: every warmup request failed (nothing measured; the warmup rows are in ``records_path``).
    """
    done = warmup(plan, records_path, settings.vllm_headers)
    failed = sum(not r.ok for r in done)
    if done and failed == len(done):
        raise WarmupFailed(warmup_failure(done))
    print(f"[INFO] Warmup completed: {len(done)} requests" + (f" ({failed} failed)" if failed else ""))
    print(load_line(plan), flush=True)
    if settings.profile:
        profiling.start(settings)
    watch = ReplicaWatch.of(settings)  # with the router: every engine behind it (scraped and polled from now)
    before, why_before = (None, None) if watch else scrape_metrics(plan.vllm_url, settings.vllm_headers)
    window = sidecar.start_window()
    window_start = time.time()
    outcome = run_locust(settings, plan, records_path)
    window_end = time.time()
    if window is not None:
        sidecar.stop_window(window.window_id)
    after, why_after = scrape_metrics(plan.vllm_url, settings.vllm_headers) if not watch else (None, None)
    gaps = []
    if watch:
        before, after, partial = watch.end()
        gaps += [partial] if partial else []
    elif before is None or after is None:
        gaps.append(f"server cross-check skipped: {why_before or why_after}")
    if window is None:
        gaps.append("sidecar sampling window not opened: resources are the samples between the run's first and last")
    if outcome.stopped and outcome.stopped not in (INTERRUPTED, SERVER_DOWN):
        gaps.append(f"run stopped early by the {outcome.stopped}")
    traces: list[str] = []
    if settings.profile:
        profiling.stop(settings)
        traces = [str(p) for p in profiling.traces_since(settings.profile_dir, window_start - 5)]
        print(f"[INFO] Profiler wrote {len(traces)} trace file(s)")
    if outcome.code not in (0, 1) and not outcome.stopped:  # 1: some request failed; the report counts them
        print(f"[WARN] Locust exited with code {outcome.code}; building the report from the rows collected.")
    records, bad = read_records(records_path)
    if bad:
        print(f"[WARN] {bad} unreadable row(s) in {records_path} skipped")
    return Measured(
        records,
        window_start,
        window_end,
        before,
        after,
        outcome.cpu_cores,
        window.window_id if window else None,
        traces,
        interrupted=outcome.stopped == INTERRUPTED,
        gaps=gaps,
        processes=outcome.processes,
        server_down=outcome.server_down,
        replicas=watch.scrapes if watch else None,
    )


def from_records_file(path: Path) -> Measured:
    """A finished run rebuilt from its rows file (no scrapes, no CPU figure; the load processes' reports when the
    ``<run id>.client.jsonl`` beside it survived)."""
    records, _ = read_records(path)
    start = min((r.started_at for r in records if r.phase == "measured"), default=time.time())
    end = max((r.ended_at for r in records), default=time.time())
    client = path.with_name(path.name.removesuffix(".requests.jsonl") + ".client.jsonl")
    return Measured(records, start, end, processes=read_process_loads(client))


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
