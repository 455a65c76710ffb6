"""Speed of the log analyzer on a generated 500,000-line (~45 MB) vLLM log, against ``grep -c ERROR``.

Run from the repository root: ``.venvs/app/bin/python benchmarks/bench_log_analyzer.py [--lines N] [--runs N]``. Each
command runs in a fresh subprocess, as a user runs it; the table shows the best and median wall-clock time of
``--runs`` runs after a warm-up (file in the page cache). First every shape the analyzer reads (plain, process
prefixes, colours, ``docker logs -t`` and CRI stamps, CRLF, a rotated pair) is timed on a log in today's vLLM shape
with 137 planted errors: ``--errors`` against ``grep -c ERROR``, median of alternating runs, counts exact. Targets:
``--stats`` <= 1 s (best run) and ``--errors`` within 10x of ``grep -c ERROR`` (median of alternating runs). Exits 1
when a target is missed or a count is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchkit import REPO, child_env

from tests.synthlog import GeneratedLog, generate_current_log, generate_vllm_log
from tests.synthrequests import write_requests_log
from tests.synthshapes import write_current_shapes, write_shapes

STATS_TARGET_S = 1.0
ERRORS_VS_GREP_TARGET = 10.0
REQUEST_RECORDS = 10_000


def timed_run(argv: Sequence[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall-clock and CPU (user + system) seconds of one run of ``argv``, its output through a pipe, as a user's
    terminal would take it (GNU grep stops at the first match when its output is /dev/null)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, cwd=REPO, env=env, capture_output=True, check=False)
    wall_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall_s, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def alternating_medians(first: Sequence[str], second: Sequence[str], runs: int) -> tuple[float, float, float, float]:
    """Median wall-clock and CPU seconds of ``first`` and ``second``, run alternately ``runs`` times each after one
    warm-up of both (so that a burst of load on a shared machine hits both alike):
    ``(first wall, second wall, first cpu, second cpu)``."""
    env = child_env()
    for argv in (first, second):
        timed_run(argv, env)
    rounds = [(timed_run(first, env), timed_run(second, env)) for _ in range(runs)]

    def median(command: int, figure: int) -> float:
        return statistics.median(r[command][figure] for r in rounds)

    return median(0, 0), median(1, 0), median(0, 1), median(1, 1)


def shape_table(lines: int, errors: int, runs: int) -> tuple[list[str], list[str]]:
    """``--errors`` against ``grep -c ERROR`` on every shape of a ``lines``-line log with ``errors`` planted
    errors: the table's lines and the shapes that missed the target or miscounted."""
    with tempfile.TemporaryDirectory(prefix="bench_shapes_") as tmp:
        log = Path(tmp) / "vllm.log"
        facts = generate_current_log(log, n_lines=lines, errors=errors)
        out = [
            f"Today's shape: {facts.lines:,} lines, {facts.size_bytes / 1e6:.1f} MB, {facts.error_events} planted "
            f"errors ({facts.traceback_events} with tracebacks), {facts.warning_events} warnings; median of {runs} "
            "alternating runs",
            f"{'shape':<10} {'grep -c ERROR s':>15} {'--errors s':>10} {'x grep':>6} {'cpu x grep':>10}  counts",
        ]
        missed = []
        for name, files in write_current_shapes(log).items():
            grep_s, errors_s, grep_cpu_s, errors_cpu_s = alternating_medians(
                ["grep", "-c", "ERROR", *map(str, files)],
                [sys.executable, "-m", "logtools", "--errors", "--log", str(files[-1])],
                runs,
            )
            wrong = check_counts(files[-1], facts)
            ratio = errors_s / grep_s
            cpu_ratio = errors_cpu_s / max(grep_cpu_s, 1e-3)
            out.append(f"{name:<10} {grep_s:15.3f} {errors_s:10.3f} {ratio:6.1f} {cpu_ratio:10.1f}  {wrong or 'exact'}")
            if wrong or ratio > ERRORS_VS_GREP_TARGET:
                missed.append(f"{name}: {wrong or f'{ratio:.1f}x grep'}")
        return out, missed


def time_command(argv: Sequence[str], runs: int) -> tuple[float, float, float]:
    """Best and median wall-clock seconds and the best CPU seconds of ``argv`` over ``runs`` runs
    (:func:`timed_run`), after one warm-up run."""
    env = child_env()
    timed_run(argv, env)
    wall_s, cpu_s = zip(*(timed_run(argv, env) for _ in range(runs)), strict=True)
    return min(wall_s), statistics.median(wall_s), min(cpu_s)


def check_counts(log: Path, facts: GeneratedLog) -> str | None:
    """Run ``--errors --json`` once and compare with the generator's truth; None when right, else why not."""
    env = child_env()
    argv = [sys.executable, "-m", "logtools", "--errors", "--json", "--log", str(log)]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"--errors exited {done.returncode}: {done.stderr.strip()}"
    by_level = json.loads(done.stdout)["errors"]["by_level"]
    want = {"ERROR": facts.error_events, "WARNING": facts.warning_events}
    return None if by_level == want else f"--errors counted {by_level}, the log has {want}"


def main(argv: list[str] | None = None) -> int:
    """Generate, time, print the table; exit status 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=500_000, help="lines of the generated log (default 500,000)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per command (best is reported)")
    parser.add_argument("--planted-errors", type=int, default=137, help="errors in today's-shape log (default 137)")
    args = parser.parse_args(argv)
    shape_lines, shape_missed = shape_table(args.lines, args.planted_errors, args.runs)
    for line in shape_lines:
        print(line)
    with tempfile.TemporaryDirectory(prefix="bench_logs_") as tmp:
        log = Path(tmp) / "vllm.log"
        requests = Path(tmp) / "requests.jsonl"
        facts = generate_vllm_log(log, n_lines=args.lines)
        write_requests_log(requests, REQUEST_RECORDS, facts.first_stamp_s)
        shapes = write_shapes(log)
        analyzer = [sys.executable, "-m", "logtools", "--log", str(log), "--requests", str(requests)]
        rows = {
            "python -c pass (start-up floor)": time_command([sys.executable, "-c", "pass"], args.runs),
            "grep -c ERROR": time_command(["grep", "-c", "ERROR", str(log)], args.runs),
            "logtools --errors": time_command([*analyzer, "--errors"], args.runs),
            "logtools --stats": time_command([*analyzer, "--stats"], args.runs),
            "logtools --errors --stats --json": time_command([*analyzer, "--errors", "--stats", "--json"], args.runs),
        }
        wrong = [why for why in [check_counts(log, facts)] if why]
        greps = {name: "grep -c ERROR" for name in rows}  # the grep of the same file, for the "x grep" column
        for name, path in shapes.items():
            argv = [sys.executable, "-m", "logtools", "--log", str(path), "--errors"]
            rows[f"grep -c ERROR ({name})"] = time_command(["grep", "-c", "ERROR", str(path)], args.runs)
            rows[f"logtools --errors ({name})"] = time_command(argv, args.runs)
            greps[f"logtools --errors ({name})"] = f"grep -c ERROR ({name})"
            wrong += [f"{name}: {why}" for why in [check_counts(path, facts)] if why]
        # the --errors target as for the shapes: median of alternating runs (a burst of load hits both alike)
        grep_s, errors_s, _, _ = alternating_medians(
            ["grep", "-c", "ERROR", str(log)], [*analyzer, "--errors"], args.runs
        )
    stats_s = rows["logtools --stats"][0]
    load_1m = os.getloadavg()[0]
    targets = {
        "logtools --errors": (f"<= {ERRORS_VS_GREP_TARGET:g}x grep: {errors_s / grep_s:.1f}x, median of {args.runs} "
                              "alternating runs", errors_s <= ERRORS_VS_GREP_TARGET * grep_s),
        "logtools --stats": (f"<= {STATS_TARGET_S:g} s", stats_s <= STATS_TARGET_S),
    }  # fmt: skip
    print(
        f"Log: {facts.lines:,} lines, {facts.size_bytes / 1e6:.1f} MB ({facts.error_events:,} error events, "
        f"{facts.warning_events:,} warnings, {facts.metrics_lines:,} stats lines); requests.jsonl: "
        f"{REQUEST_RECORDS:,} records; best of {args.runs} runs; {os.cpu_count()} CPUs, load average {load_1m:.1f}"
    )
    print(f"{'command':<36} {'best s':>7} {'median s':>8} {'cpu s':>6}  {'x grep':>6}  target")
    for name, (best, median, cpu) in rows.items():
        target, ok = targets.get(name, ("", True))
        verdict = ("ok" if ok else "MISSED") if target else ""
        ratio = best / rows[greps.get(name, name)][0]
        print(f"{name:<36} {best:7.3f} {median:8.3f} {cpu:6.3f}  {ratio:6.1f}  {target} {verdict}")
    for why in wrong:
        print(f"WRONG COUNTS: {why}")
    for why in shape_missed:
        print(f"MISSED (shape): {why}")
    return 0 if all(ok for _, ok in targets.values()) and not wrong and not shape_missed else 1


if __name__ == "__main__":
    raise SystemExit(main())
