"""``make compare A=<id or baseline> B=<id or baseline>``: B against A, side by side, written by the sidecar.

``python -m loadgen.command.compare A B`` — A and B are report ids (``benchmark_report_…``), series ids
(``benchmark_series_…``, sweeps or repeats) or baseline names. Prints what differs (model, vLLM flags, hardware,
workload) first, then each load point's changes (with 95 % intervals when the runs were repeated), and writes
``reports/benchmark_compare_<ts>.json`` / ``.md`` / ``.html`` (overlaid curves). Exit codes: 0 done, 1 the sidecar
is unreachable or failing, 2 an unknown reference.
"""

from __future__ import annotations

import argparse
import sys

from core.api import CompareRequest, CompareResponse
from core.pipes import guard_stdout
from core.settings import get_settings
from loadgen.errors import BenchError
from loadgen.sidecar_client import SidecarClient, SidecarRefused
from loadgen.terminal.summary import ab_compare_lines


def main(argv: list[str] | None = None) -> int:
    """Compare two results through the sidecar; print the comparison."""
    guard_stdout()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", help="reference: report id, series id or baseline name")
    parser.add_argument("b", help="compared with A: report id, series id or baseline name")
    parser.add_argument("--threshold-pct", type=float, default=None,
                        help="a worse change beyond this is a regression (default GATE_THRESHOLD_PCT)")
    args = parser.parse_args(argv)
    if not args.a or not args.b:
        print("[ERROR] name both results: make compare A=<id or baseline> B=<id or baseline>", file=sys.stderr)
        return 2
    settings = get_settings()
    threshold = settings.gate_threshold_pct if args.threshold_pct is None else args.threshold_pct
    client = SidecarClient.of(settings)
    try:
        done = client.post("/compare", CompareRequest(a=args.a, b=args.b, threshold_pct=threshold), CompareResponse)
    except BenchError as exc:  # refused (400, 404, 422: bad input, exit 2) or unreachable (1)
        print(f"[ERROR] {exc}", file=sys.stderr)
        return 2 if isinstance(exc, SidecarRefused) and exc.status in (400, 404, 422) else 1
    for line in ab_compare_lines(done.comparison, done.compare_path):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
