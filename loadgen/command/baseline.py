"""``make baseline NAME=v0.2.1 [REPORT=benchmark_report_…]``: mark a report as a named baseline.

``python -m loadgen.command.baseline NAME [REPORT_ID]`` asks the sidecar (the only writer of ``reports/``) to record it
in ``reports/baselines.json``; without REPORT_ID the latest report is marked; a series id (``benchmark_series_…``, a
REPEAT or SWEEP) marks the series, and the gate then judges later series with its confidence intervals. ``--list`` shows
the marks. Later runs of the same workload print ``vs_<NAME>: +12% throughput`` and ``make benchmark GATE=<NAME>`` gates
on it.
Exit codes: 0 done, 1 sidecar unreachable or failing, 2 bad name, unknown report or no report yet.
"""

from __future__ import annotations

import argparse
import sys

from core.parsing import validate_name
from core.pipes import guard_stdout
from core.series_stats import is_series_id
from core.settings import get_settings
from loadgen.errors import BenchError
from loadgen.sidecar_client import SidecarClient, SidecarRefused
from loadgen.terminal.summary import moved_text


def main(argv: list[str] | None = None) -> int:
    """Mark (or list) baselines through the sidecar."""
    guard_stdout()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", nargs="?", help="baseline name, e.g. v0.2.1")
    parser.add_argument("report_id", nargs="?", help="report to mark (default: the latest)")
    parser.add_argument("--list", action="store_true", help="list the named baselines and exit")
    args = parser.parse_args(argv)
    client = SidecarClient.of(get_settings())
    if not args.list:
        if not args.name:
            print("[ERROR] a baseline name is required: make baseline NAME=v0.2.1 [REPORT=<id>]", file=sys.stderr)
            return 2
        try:
            validate_name(args.name)
        except ValueError as exc:
            print(f"[ERROR] {exc}", file=sys.stderr)
            return 2
    try:
        if args.list:
            for name, result_id in client.baselines().items():
                print(f"[BASELINE] {name} -> {result_id}")
            return 0
        if args.report_id and is_series_id(args.report_id):  # a series: the gate then uses its intervals
            previous = client.mark_series_baseline(args.name, args.report_id)
            print(f"[BASELINE] {args.name} -> {args.report_id} (a series: judged with confidence intervals)")
            new_id = args.report_id
        else:
            marked = client.mark_baseline(args.name, args.report_id)
            p99 = marked.latency_p99_ms
            print(f"[BASELINE] {marked.name} -> {marked.report_id} ({marked.timestamp}: "
                  f"{marked.throughput_req_per_sec:.2f} req/s, p99 {'n/a' if p99 is None else f'{p99:.0f}ms'})")
            previous, new_id = marked.previous_id, marked.report_id
    except BenchError as exc:  # refused (400, 404, 422: bad input, exit 2) or unreachable (1)
        print(f"[ERROR] {exc}", file=sys.stderr)
        return 2 if isinstance(exc, SidecarRefused) and exc.status in (400, 404, 422) else 1
    line = moved_text(args.name, previous, new_id)
    if line:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
