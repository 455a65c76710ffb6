"""The client-limited verdict on lateness: a CPU-starved client is flagged with its lag, an unstarved one is not.

Run from the repository root (no stack needed; Linux, 2+ cores)::

    .venvs/app/bin/python benchmarks/bench_lag_verdict.py [--run-time-s 20] [--busy 3]

Two closed-loop runs of the benchmark's Locust path and verdict (:func:`core.clientview.client_view`, as ``make
benchmark`` computes them): **starved** (the client pinned to core 0 with ``--busy`` busy loops, the mock on core 1:
TTFT 20 ms, ITL 2 ms, 100 tokens, ``--users`` users) and **unstarved** (the client free, a slow mock: TTFT 400 ms, ITL
50 ms, 20 tokens, 8 users). For each: the load processes' CPU, the event-loop lag (p50/p99), how far it could have
moved TTFT and ITL, the verdict, and what the CPU-only rule (a process ≥ 0.9 core) would have said. Exits 0 when the
starved run is flagged and the unstarved one is not, 1 otherwise, 2 when a run could not be made.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import psutil
from benchkit import work_folder

from core.clientview import CPU_LIMIT_CORES, ClientView, client_view, share_text
from core.report_schema import BenchmarkConfig
from core.settings import Settings
from core.stats import measured_window_s
from loadgen.childprocs import ProcessError, mock_server
from loadgen.orchestrate.locust_run import run_locust
from loadgen.orchestrate.measured_run import read_records

BUSY_LOOP = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"


def one_run(name: str, workdir: Path, *, users: int, run_time_s: float, mock_args: dict[str, float],
            client_core: int | None, busy: int) -> ClientView:  # fmt: skip
    """One closed-loop run; the client (this process's children) pinned to ``client_core`` with ``busy`` loops."""
    folder = workdir / name
    folder.mkdir()
    own = os.sched_getaffinity(0)
    with ExitStack() as stack:
        mock = stack.enter_context(mock_server(folder / "mock.log", processes=1, **mock_args))  # type: ignore[arg-type]
        loops: list[subprocess.Popen[bytes]] = []
        if client_core is not None:
            mock_proc = psutil.Process(mock.pid)
            for proc in [mock_proc, *mock_proc.children(recursive=True)]:  # the mock's tree on the other core
                proc.cpu_affinity([1 - client_core])
            loops = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(client_core)]) for _ in range(busy)]
            os.sched_setaffinity(0, {client_core})  # Locust, started below, inherits it
        try:
            plan = BenchmarkConfig(
                concurrency=users, duration_s=run_time_s, warmup_requests=0, max_tokens=int(mock_args["tokens"]),
                temperature=0.0, dataset="loadgen/workloads/data/prompts_zh.jsonl", seed=0, vllm_url=mock.url,
                model="mock-model", drain_s=5.0,
            )  # fmt: skip
            settings = Settings(_env_file=None, vllm_base_url=mock.url, logs_dir=folder / "logs")  # type: ignore[call-arg]
            rows_path = folder / "run.requests.jsonl"
            rows_path.touch()
            print(f"[LAG] {name}: {users} users for {run_time_s:g} s against mock {mock_args} ...", flush=True)
            outcome = run_locust(settings, plan, rows_path)
        finally:
            os.sched_setaffinity(0, own)
            for loop in loops:
                loop.kill()
                loop.wait()
    records, _ = read_records(rows_path)
    measured = [r for r in records if r.phase == "measured" and r.error_kind != "incomplete"]
    if not any(r.ok for r in measured):
        raise ProcessError(f"{name}: no request succeeded ({folder})")
    return client_view(measured, measured_window_s(measured), outcome.cpu_cores, None, outcome.processes, plan.workers)


def describe(name: str, view: ClientView) -> list[str]:
    """Lines for one run (pure)."""
    cores = "/".join(f"{p.cpu_cores:.2f}" for p in view.processes)
    cpu_only = any(p.cpu_cores >= CPU_LIMIT_CORES for p in view.processes)
    lines = [
        f"{name}: {view.requests_per_sec:.1f} req/s, {view.chunks_per_sec:.0f} chunks/s; load process CPU {cores} "
        f"cores; lag p50 {view.lag_p50_ms or 0:.2f} ms, p99 {view.lag_p99_ms or 0:.2f} ms, "
        f"max {view.lag_max_ms or 0:.1f} ms",
    ]
    for impact in view.lag_impact:
        lines.append(f"    {impact.figure:<12} {impact.value_ms:9.2f} ms   lag {impact.lag_ms:7.2f} ms = "
                     f"{share_text(impact.share_pct):>7}")  # fmt: skip
    lines.append(f"    verdict: {'CLIENT-LIMITED' if view.client_limited else 'not client-limited'}"
                 f" ({view.reason or 'lag within the limit'}); CPU-only rule would say: "
                 f"{'limited' if cpu_only else 'not limited'}")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run both and judge; 0 pass, 1 miss, 2 a run failed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-time-s", type=float, default=20.0)
    parser.add_argument("--users", type=int, default=32, help="users of the starved run")
    parser.add_argument("--busy", type=int, default=3, help="busy loops sharing the starved client's core")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, rows of every run)")
    args = parser.parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2:
        parser.error("needs two cores (the client on one, the mock on the other)")
    with work_folder("lag_verdict_", args.keep, ProcessError, OSError) as workdir:
        print(f"[LAG] load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; work folder {workdir}")
        starved = one_run("starved", workdir, users=args.users, run_time_s=args.run_time_s, client_core=0,
                          busy=args.busy, mock_args={"tokens": 100, "ttft_ms": 20, "itl_ms": 2})  # fmt: skip
        unstarved = one_run("unstarved", workdir, users=8, run_time_s=args.run_time_s, client_core=None, busy=0,
                            mock_args={"tokens": 20, "ttft_ms": 400, "itl_ms": 50})  # fmt: skip
    for name, view in (("starved", starved), ("unstarved", unstarved)):
        for line in describe(name, view):
            print(f"[LAG] {line}")
    passed = starved.client_limited and not unstarved.client_limited
    print(f"[LAG] starved flagged: {starved.client_limited}; unstarved flagged: {unstarved.client_limited}  "
          + ("PASS" if passed else "FAIL"))  # fmt: skip
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
