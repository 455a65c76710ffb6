"""Scale-out: chunks/s of the benchmark's Locust run with 2 worker processes against 1, on an unsaturated mock.

Run from the repository root (no stack needed)::

    .venvs/app/bin/python benchmarks/bench_scaleout.py [--requests 12000] [--users 32] [--tokens 256] [--repeats 3]

Each run is the benchmark's own Locust path (:func:`loadgen.orchestrate.locust_run.run_locust`) in request-count
mode against the bundled mock with no delays (its CPU is printed); chunks/s = content chunks of the measured rows ÷
their window. Every run must give exactly ``--requests`` rows; pairs alternate their order. CPU (psutil, every 0.1 s,
over the same window): the client is this process's tree minus the mock. Besides the wall-clock ratio it prints the
2-worker run's share of client CPU and the chunks per client CPU-second: on a busy machine Linux's autogroup
scheduling gives a terminal session one share however many processes it runs, so the per-CPU-second ratio shows
whether the workers scale (2 × it is what two free cores would give).

Target: 2 workers ≥ 1.7 × one worker's chunks/s (median of the pairs). Exits 0 on pass, 1 on a miss, 2 when a run
could not be made.
"""

from __future__ import annotations

import argparse
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

from benchkit import work_folder

from core.report_schema import BenchmarkConfig
from core.settings import Settings
from core.stats import measured_window_s
from loadgen.childprocs import CpuSampler, ProcessError, cpu_in_window, mock_server
from loadgen.orchestrate.locust_run import run_locust
from loadgen.orchestrate.measured_run import read_records

TARGET_RATIO = 1.7


@dataclass(frozen=True)
class Run:
    """One run: rows, chunks/s, and the cores of the client, of each load process and of the mock."""

    workers: int
    rows: int
    chunks_per_sec: float
    client_cores: float
    process_cores: list[float]
    mock_cores: float

    @property
    def chunks_per_cpu_s(self) -> float:
        """Chunks per client CPU-second."""
        return self.chunks_per_sec / self.client_cores if self.client_cores > 0 else 0.0

    def line(self) -> str:
        per = "/".join(f"{c:.2f}" for c in self.process_cores)
        return (f"{self.workers} worker(s): {self.rows} rows, {self.chunks_per_sec:7.0f} chunks/s; client "
                f"{self.client_cores:.2f} cores (load processes {per}), {self.chunks_per_cpu_s:7.0f} chunks/CPU-s; "
                f"mock {self.mock_cores:.2f} cores")  # fmt: skip


def one_run(workers: int, folder: Path, url: str, mock_pid: int, args: argparse.Namespace) -> Run:
    """The benchmark's Locust run with ``workers`` processes.

    Raises:
        ProcessError: Locust failed or the row count is not exactly ``--requests``.
    """
    folder.mkdir()
    plan = BenchmarkConfig(
        concurrency=args.users, requests=args.requests, warmup_requests=0, max_tokens=args.tokens, temperature=0.0,
        dataset="loadgen/workloads/data/prompts_zh.jsonl", seed=0, vllm_url=url, model="mock-model", workers=workers,
    )  # fmt: skip
    settings = Settings(_env_file=None, vllm_base_url=url, logs_dir=folder / "logs")  # type: ignore[call-arg]
    rows_path = folder / "run.requests.jsonl"
    rows_path.touch()
    with CpuSampler(mock_pid) as mock, CpuSampler(os.getpid()) as tree:
        outcome = run_locust(settings, plan, rows_path)
    records, bad = read_records(rows_path)
    measured = [r for r in records if r.phase == "measured"]
    if outcome.code not in (0, 1) or len(measured) != args.requests or bad:
        raise ProcessError(f"{workers} worker(s): exit {outcome.code}, {len(measured)} rows of {args.requests} "
                           f"({folder})")  # fmt: skip
    window = measured_window_s(measured)
    start = min(r.started_at for r in measured)
    mock_cpu_s = cpu_in_window(mock.samples, start, start + window)
    client_cpu_s = cpu_in_window(tree.samples, start, start + window) - mock_cpu_s
    return Run(
        workers=workers,
        rows=len(measured),
        chunks_per_sec=sum(r.content_chunks for r in measured) / window,
        client_cores=client_cpu_s / window,
        process_cores=[p.cpu_cores for p in outcome.processes],
        mock_cores=mock_cpu_s / window,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the pairs and judge; 0 pass, 1 miss, 2 a run failed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=12000, help="requests of every run (exact)")
    parser.add_argument("--users", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=256, help="tokens per mock answer (one per event)")
    parser.add_argument("--repeats", type=int, default=3, help="pairs (order alternates)")
    parser.add_argument("--mock-processes", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, rows of every run)")
    args = parser.parse_args(argv)
    ratios, cpu_ratios, per_cpu = [], [], []
    with work_folder("scaleout_", args.keep, ProcessError, ValueError) as workdir:
        print(f"[SCALE] load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; mock {args.tokens} tokens, "
              f"no delays, {args.mock_processes} process(es); {args.users} users, {args.requests} requests; {workdir}")
        with mock_server(workdir / "mock.log", tokens=args.tokens, ttft_ms=0, itl_ms=0,
                         processes=args.mock_processes) as mock:  # fmt: skip
            for i in range(args.repeats):
                runs = {}
                for workers in (1, 2) if i % 2 == 0 else (2, 1):
                    runs[workers] = one_run(workers, workdir / f"pair{i}_w{workers}", mock.url, mock.pid, args)
                    print(f"[SCALE] pair {i + 1}: {runs[workers].line()}", flush=True)
                ratios.append(runs[2].chunks_per_sec / runs[1].chunks_per_sec)
                cpu_ratios.append(runs[2].client_cores / runs[1].client_cores)
                per_cpu.append(runs[2].chunks_per_cpu_s / runs[1].chunks_per_cpu_s)
                print(f"[SCALE] pair {i + 1}: 2 workers / 1 worker: chunks/s {ratios[-1]:.2f}, client CPU "
                      f"{cpu_ratios[-1]:.2f}, chunks per CPU-second {per_cpu[-1]:.2f}", flush=True)  # fmt: skip
    value = statistics.median(ratios)
    passed = value >= TARGET_RATIO
    print(f"[SCALE] medians: the 2-worker runs got {statistics.median(cpu_ratios):.2f}x the client CPU and kept "
          f"{statistics.median(per_cpu):.2f}x the chunks per CPU-second of the 1-worker runs (two free cores: "
          f"{2 * statistics.median(per_cpu):.2f}x)")  # fmt: skip
    print(f"[SCALE] chunks/s 2 workers / 1 worker = {value:.2f} (median of {len(ratios)}: "
          f"{', '.join(f'{r:.2f}' for r in ratios)})  target >= {TARGET_RATIO}  " + ("PASS" if passed else "FAIL"))
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
