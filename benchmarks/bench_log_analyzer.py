"""Speed of the log analyzer on a generated 500,000-line (~45 MB) vLLM log, against ``grep -c ERROR``.

Run from the repository root: ``.venvs/app/bin/python benchmarks/bench_log_analyzer.py [--lines N] [--runs N]``.
Each command runs in a fresh subprocess, as a user would run it; the figure is the best wall-clock time of
``--runs`` runs after one warm-up run (file in the page cache). Targets: ``--stats`` <= 1 s and ``--errors`` within
10x of ``grep -c ERROR`` on the same file. Exits 1 when a target is missed (or the analyzer's counts are wrong).
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.synthlog import GeneratedLog, generate_vllm_log  # noqa: E402

STATS_TARGET_S = 1.0
ERRORS_VS_GREP_TARGET = 10.0
REQUEST_RECORDS = 10_000


def write_requests(path: Path, count: int, start_s: float) -> None:
    """A deterministic ``requests.jsonl`` with ``count`` records (1% errors) ending after ``start_s``."""
    from datetime import UTC, datetime

    lines = []
    for i in range(count):
        total_ms = 200.0 + (i * 7919) % 3000
        ts = datetime.fromtimestamp(start_s + i * 2.0, UTC).isoformat(timespec="milliseconds")
        failed = i % 100 == 0
        record = {
            "ts": ts, "source": "loadtest" if i % 10 else "ui", "request_id": f"r{i}", "model": "ernie",
            "prompt_tokens": 20 + i % 50, "completion_tokens": None if failed else 128, "ttft_ms": total_ms / 10,
            "total_ms": total_ms, "status": "error" if failed else "ok", "error": "timeout" if failed else None,
        }  # fmt: skip
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")


def child_env() -> dict[str, str]:
    """The environment of the timed commands: this one, with the repository importable and bytecode caching on
    (a user's shell does not set PYTHONDONTWRITEBYTECODE; without .pyc files every run recompiles the modules)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(REPO)}


def time_command(argv: Sequence[str], runs: int) -> tuple[float, float, float]:
    """Best and median wall-clock seconds and the best CPU seconds (user + system) of ``argv`` over ``runs`` runs,
    after one warm-up run. Output is captured through a pipe, as a user's terminal would take it (GNU grep stops at
    the first match when its output is /dev/null)."""
    env = child_env()
    subprocess.run(argv, cwd=REPO, env=env, capture_output=True, check=False)
    wall_s, cpu_s = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(argv, cwd=REPO, env=env, capture_output=True, check=False)
        wall_s.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_s.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return min(wall_s), statistics.median(wall_s), min(cpu_s)


def check_counts(log: Path, facts: GeneratedLog) -> str | None:
    """Run ``--errors --json`` once and compare with the generator's truth; None when right, else why not."""
    env = child_env()
    argv = [sys.executable, "-m", "services.logtools", "--errors", "--json", "--log", str(log)]
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
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_logs_") as tmp:
        log = Path(tmp) / "vllm.log"
        requests = Path(tmp) / "requests.jsonl"
        facts = generate_vllm_log(log, n_lines=args.lines)
        write_requests(requests, REQUEST_RECORDS, facts.first_stamp_s)
        analyzer = [sys.executable, "-m", "services.logtools", "--log", str(log), "--requests", str(requests)]
        rows = {
            "python -c pass (start-up floor)": time_command([sys.executable, "-c", "pass"], args.runs),
            "grep -c ERROR": time_command(["grep", "-c", "ERROR", str(log)], args.runs),
            "logtools --errors": time_command([*analyzer, "--errors"], args.runs),
            "logtools --stats": time_command([*analyzer, "--stats"], args.runs),
            "logtools --errors --stats --json": time_command([*analyzer, "--errors", "--stats", "--json"], args.runs),
        }
        wrong = check_counts(log, facts)
    grep_s = rows["grep -c ERROR"][0]
    errors_s = rows["logtools --errors"][0]
    stats_s = rows["logtools --stats"][0]
    load_1m = os.getloadavg()[0]
    targets = {
        "logtools --errors": (f"<= {ERRORS_VS_GREP_TARGET:g}x grep ({ERRORS_VS_GREP_TARGET * grep_s:.3f} s)",
                              errors_s <= ERRORS_VS_GREP_TARGET * grep_s),
        "logtools --stats": (f"<= {STATS_TARGET_S:g} s", stats_s <= STATS_TARGET_S),
    }  # fmt: skip
    print(
        f"Log: {facts.lines:,} lines, {facts.size_bytes / 1e6:.1f} MB ({facts.error_events:,} error events, "
        f"{facts.warning_events:,} warnings, {facts.metrics_lines:,} stats lines); requests.jsonl: "
        f"{REQUEST_RECORDS:,} records; best of {args.runs} runs; {os.cpu_count()} CPUs, load average {load_1m:.1f}"
    )
    print(f"{'command':<36} {'best s':>7} {'median s':>8} {'cpu s':>6}  {'x grep':>6}  target (on best wall clock)")
    for name, (best, median, cpu) in rows.items():
        target, ok = targets.get(name, ("", True))
        verdict = ("ok" if ok else "MISSED") if target else ""
        print(f"{name:<36} {best:7.3f} {median:8.3f} {cpu:6.3f}  {best / grep_s:6.1f}  {target} {verdict}")
    if wrong:
        print(f"WRONG COUNTS: {wrong}")
    return 0 if all(ok for _, ok in targets.values()) and not wrong else 1


if __name__ == "__main__":
    raise SystemExit(main())
