"""Memory, time and accuracy of ``--stats`` on a generated 3,000,000-line ``requests.jsonl`` (~690 MB).

Run from the repository root: ``.venvs/app/bin/python benchmarks/bench_request_stats.py [--lines N] [--small N]``.
The analyzer runs in a fresh subprocess, as a user runs it, once on the big file and once on a small one of the same
shape (``--small``, default 10,000 lines): the peak RSS of both (Linux ``VmHWM``) side by side shows whether memory
grows with the file. The percentiles it prints are compared with exact ones computed here from the same
generated values (``statistics.quantiles``, inclusive: the reports' definition). Targets: peak RSS <= 60 MB on the big
file, every percentile within the stated bound (0.5 %, ``logtools/aggregate.py``). Exits 1 on a miss.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchkit import REPO, child_env

from logtools.aggregate import RELATIVE_ACCURACY
from tests.synthrequests import OkLatencies, write_requests_log

RSS_TARGET_MB = 60.0
START_S = 1_790_000_000.0


PEAK_RSS_REPORTER = """
import atexit, runpy, sys

def peak_rss():
    with open("/proc/self/status") as status:
        sys.stderr.write("\\n" + next(line for line in status if line.startswith("VmHWM:")))

atexit.register(peak_rss)
sys.argv = ["logtools", *sys.argv[1:]]
runpy.run_module("logtools", run_name="__main__", alter_sys=True)
"""
"""Runs the analyzer as ``python -m logtools`` does and writes the process's peak RSS (``VmHWM``) at exit.
(``wait4``'s ``ru_maxrss`` would not do: it keeps the high-water mark of the forked copy of this big process.)"""


def run_stats(requests: Path, log: Path) -> tuple[dict[str, Any], float, float]:
    """``--stats --json`` on ``requests``: (its JSON, wall seconds, peak RSS of the analyzer's process in MB)."""
    argv = [sys.executable, "-c", PEAK_RSS_REPORTER, "--stats", "--json", "--requests", str(requests)]
    argv += ["--log", str(log)]
    env = child_env()
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"--stats exited {done.returncode}: {done.stderr}")
    peak_kb = int(done.stderr.rsplit("VmHWM:", 1)[1].split()[0])
    return json.loads(done.stdout)["stats"]["requests"], wall_s, peak_kb / 1024


def worst_error(reported: dict[str, float], exact_values: list[float]) -> tuple[float, str]:
    """Largest relative error of p50/p90/p95/p99 against the exact inclusive percentiles, and a one-line table."""
    cuts = statistics.quantiles(exact_values, n=100, method="inclusive")
    worst, parts = 0.0, []
    for p in (50, 90, 95, 99):
        exact, got = cuts[p - 1], reported[f"p{p}"]
        error = abs(got - exact) / exact if exact else abs(got)
        worst = max(worst, error)
        parts.append(f"p{p} {got:,.1f} vs {exact:,.1f} ({error * 100:.3f} %)")
    return worst, "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Generate, measure, print; exit status 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=3_000_000, help="lines of the big file (default 3,000,000)")
    parser.add_argument("--small", type=int, default=10_000, help="lines of the small file (default 10,000)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_requests_") as tmp:
        log = Path(tmp) / "vllm.log"
        log.write_text("")  # an empty vLLM log: the figures are the request log's
        small, big = Path(tmp) / "small.jsonl", Path(tmp) / "requests.jsonl"
        write_requests_log(small, args.small, START_S)
        latencies = OkLatencies()
        started = time.perf_counter()
        write_requests_log(big, args.lines, START_S, on_ok=latencies)
        generated_s = time.perf_counter() - started
        size_mb = big.stat().st_size / 1e6
        _, small_s, small_mb = run_stats(small, log)
        stats, big_s, big_mb = run_stats(big, log)
    worst_total, total_table = worst_error(stats["total_ms"], list(latencies.total_ms))
    worst_ttft, ttft_table = worst_error(stats["ttft_ms"], list(latencies.ttft_ms))
    worst = max(worst_total, worst_ttft)
    rss_ok, accurate = big_mb <= RSS_TARGET_MB, worst <= RELATIVE_ACCURACY
    counted = stats["requests"] == args.lines and stats["ok"] == len(latencies.total_ms)
    print(
        f"requests.jsonl: {args.lines:,} lines, {size_mb:,.0f} MB (generated in {generated_s:.0f} s), "
        f"{len(latencies.total_ms):,} ok; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'file':<28} {'wall s':>7} {'lines/s':>10} {'peak RSS MB':>12}")
    print(f"{f'small ({args.small:,} lines)':<28} {small_s:7.2f} {args.small / small_s:10,.0f} {small_mb:12.1f}")
    print(f"{f'big ({args.lines:,} lines)':<28} {big_s:7.2f} {args.lines / big_s:10,.0f} {big_mb:12.1f}")
    verdict = "ok" if rss_ok else "MISSED"
    print(f"peak RSS big / small: {big_mb / small_mb:.2f}; target <= {RSS_TARGET_MB:g} MB: {verdict}")
    print(f"total_ms: {total_table}")
    print(f"ttft_ms:  {ttft_table}")
    print(
        f"worst percentile error {worst * 100:.3f} % (bound {RELATIVE_ACCURACY * 100:g} %): "
        f"{'ok' if accurate else 'MISSED'}; counts {'ok' if counted else 'WRONG'}"
    )
    return 0 if rss_ok and accurate and counted else 1


if __name__ == "__main__":
    raise SystemExit(main())
