"""``make baseline NAME=v0.2.1 [REPORT=benchmark_report_…]``: mark a report as a named baseline.

``python -m loadgen.command.baseline NAME [REPORT_ID]`` asks the sidecar (the only writer of ``reports/``) to record
it in
``reports/baselines.json``; without REPORT_ID the latest report is marked; a series id (``benchmark_series_…``, a
REPEAT or SWEEP) marks the series, and the gate then judges later series with its confidence intervals. ``--list``
shows the marks. Later runs of the same workload print ``vs_<NAME>: +12% throughput`` and
``make benchmark GATE=<NAME>`` gates on it.
Exit codes: 0 done, 1 sidecar unreachable or failing, 2 bad name, unknown report or no report yet.
"""

from __future__ import annotations

import argparse
import sys

import httpx

from core.parsing import validate_name
from core.pipes import guard_stdout
from core.series import is_series_id
from core.settings import get_settings


def moved_text(name: str, previous: str | None, new: str) -> str | None:
    """``[BASELINE] v1 moved: was <old id>, now <new id>`` when marking replaced another mark; None for a new name
    or the same id again."""
    if previous is None or previous == new:
        return None
    return f"[BASELINE] {name} moved: was {previous}, now {new}"


def main(argv: list[str] | None = None) -> int:
    """Mark (or list) baselines through the sidecar."""
    guard_stdout()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", nargs="?", help="baseline name, e.g. v0.2.1")
    parser.add_argument("report_id", nargs="?", help="report to mark (default: the latest)")
    parser.add_argument("--list", action="store_true", help="list the named baselines and exit")
    args = parser.parse_args(argv)
    settings = get_settings()
    url = settings.sidecar_url
    token = settings.sidecar_auth_token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
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
            response = httpx.get(f"{url}/baselines", timeout=30)
        elif args.report_id and is_series_id(args.report_id):  # a series: the gate then uses its intervals
            response = httpx.put(f"{url}/series/{args.report_id}/baseline/{args.name}", timeout=30, headers=headers)
            if response.status_code == 200:
                print(f"[BASELINE] {args.name} -> {args.report_id} (a series: judged with confidence intervals)")
                _print_moved(args.name, response, args.report_id)
                return 0
        else:
            body = {"report_id": args.report_id} if args.report_id else {}
            response = httpx.put(f"{url}/baselines/{args.name}", json=body, timeout=30, headers=headers)
    except httpx.HTTPError as exc:
        print(
            f"[ERROR] the sidecar is not answering at {url} ({type(exc).__name__}); start it with `make up`.",
            file=sys.stderr,
        )
        return 1
    if args.list and response.status_code == 200:
        for name, report_id in response.json().items():
            print(f"[BASELINE] {name} -> {report_id}")
        return 0
    if response.status_code in (401, 403, 503):
        print(
            f"[ERROR] the sidecar refused the token (HTTP {response.status_code}): marking a baseline needs "
            "SIDECAR_TOKEN or its file (SIDECAR_TOKEN_FILE, default run/sidecar_token, made by `make up`).",
            file=sys.stderr,
        )
        return 1
    if response.status_code in (400, 404, 422):
        print(f"[ERROR] {_detail(response)}", file=sys.stderr)
        return 2
    if response.status_code != 200:
        print(f"[ERROR] the sidecar failed (HTTP {response.status_code}): {response.text[:300]}", file=sys.stderr)
        return 1
    marked = response.json()
    p99 = marked.get("latency_p99_ms")
    print(
        f"[BASELINE] {marked['name']} -> {marked['report_id']} ({marked['timestamp']}: "
        f"{marked['throughput_req_per_sec']:.2f} req/s, p99 {'n/a' if p99 is None else f'{p99:.0f}ms'})"
    )
    _print_moved(args.name, response, marked["report_id"])
    return 0


def _print_moved(name: str, response: httpx.Response, new: str) -> None:
    """Print :func:`moved_text` from the sidecar's ``previous_id``, when the mark moved."""
    try:
        previous = response.json().get("previous_id")
    except (ValueError, AttributeError):
        return
    line = moved_text(name, previous if isinstance(previous, str) else None, new)
    if line:
        print(line)


def _detail(response: httpx.Response) -> str:
    """FastAPI's ``detail`` message, or the raw body."""
    try:
        detail = response.json().get("detail")
    except ValueError:
        return response.text[:300]
    return detail if isinstance(detail, str) else str(detail)[:300]


if __name__ == "__main__":
    raise SystemExit(main())
