"""Command line of the log analyzer: ``python -m services.logtools --errors|--slow|--stats [options]``.

Exit status: 0 when the reports were made, 2 on bad input (unknown option, unparsable ``--since``, missing file);
the message says what was wrong and what to do. Several reports can be asked at once; ``--json`` prints one object
keyed by report name (``{"errors": {...}, "stats": {...}}``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from services.logtools.timeparse import SINCE_HELP, epoch_to_iso, parse_since

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_THRESHOLD_MS = 1000.0
DEFAULT_LIMIT = 20


class InputError(Exception):
    """Bad input from the user; the message is printed as is and the exit status is 2."""


def _since(text: str) -> float:
    try:
        return parse_since(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of milliseconds, e.g. 1000")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (``--help`` text included)."""
    parser = argparse.ArgumentParser(
        prog="python -m services.logtools",
        description="Errors, slow requests and stats from logs/vllm.log and logs/requests.jsonl "
        "(rotated .1/.2.gz files included).",
    )
    what = parser.add_argument_group("reports (one or more)")
    what.add_argument("--errors", action="store_true", help="WARNING/ERROR lines and tracebacks, grouped and counted")
    what.add_argument("--slow", action="store_true", help="requests slower than --threshold-ms, slowest first")
    what.add_argument("--stats", action="store_true", help="requests, error rate, latency pcts, tokens/s, engine")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument("--since", type=_since, metavar="WHEN", help=f"only what happened since WHEN: {SINCE_HELP}")
    parser.add_argument(
        "--threshold-ms", type=_positive, default=DEFAULT_THRESHOLD_MS, help="--slow threshold (default: 1000)"
    )
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="groups/requests listed (default: 20)")
    parser.add_argument("--tracebacks", action="store_true", help="print each error group's example traceback")
    parser.add_argument("--log", type=Path, help="vLLM log (default: logs/vllm.log from the settings)")
    parser.add_argument("--requests", type=Path, help="request log (default: logs/requests.jsonl from the settings)")
    parser.add_argument("--no-rotated", action="store_true", help="read only the given files, not .1, .2.gz, ...")
    return parser


def _default_paths() -> tuple[Path, Path]:
    """Default log files from the settings (imported lazily: pydantic-settings costs ~0.3 s of start-up)."""
    from services.settings import get_settings

    settings = get_settings()
    return settings.vllm_log_file, settings.logs_dir / "requests.jsonl"


def _family(path: Path, rotated: bool) -> list[Path]:
    from services.logtools.reader import rotated_family

    if not rotated:
        return [path] if path.is_file() else []
    return rotated_family(path)


def _missing_log(path: Path) -> str:
    return (
        f"vLLM log not found: {path} (nor rotated {path.name}.1, {path.name}.2.gz, ...). It is written once the stack "
        "runs (`make up`); or point --log at a vLLM log file."
    )


def _missing_requests(path: Path) -> str:
    return (
        f"request log not found: {path}. The chat UI and `make benchmark` write it (one line per request); send a "
        "request first, or point --requests at a requests.jsonl file."
    )


def _read_facts(read: Any, skipped: list[str] | None = None) -> dict[str, Any]:
    return {
        "files": read.files,
        "bytes_read": read.bytes_read,
        "overlong_lines": read.overlong_lines,
        "partial_lines_skipped": read.partial_lines_skipped,
        "problems": read.problems,
        "skipped_older_than_since": skipped or [],
    }


def run_log_scan(files: list[Path], errors: bool, stats: bool, since_s: float | None, limit: int) -> dict[str, Any]:
    """Scan the vLLM log once for what ``--errors`` and/or ``--stats`` need; returns their JSON-ready parts."""
    from services.logtools.groups import ErrorGroups
    from services.logtools.scan import LogScanner

    groups = ErrorGroups()
    engine = None
    if stats:
        from services.logtools.aggregate import EngineSummary

        engine = EngineSummary()
    scanner = LogScanner(on_event=groups.add, on_metrics=engine.add_rows if engine else None, since_s=since_s)
    result = scanner.scan(files)
    out: dict[str, Any] = {"source": _read_facts(result.read, result.skipped_files), "errors": groups.summary(limit)}
    if engine is not None:
        out["engine"] = engine.summary()
        out["lines"] = result.lines
        http = result.http
        out["http"] = {
            "inference_requests": http.inference_requests,
            "status_4xx": http.status_4xx,
            "status_5xx": http.status_5xx,
        }
    return out


def run_requests(
    files: list[Path], slow: bool, stats: bool, since_s: float | None, threshold_ms: float, limit: int
) -> dict[str, Any]:
    """Read the request log once for ``--slow`` and/or ``--stats``."""
    from services.logtools.aggregate import RequestStats, SlowRequests
    from services.logtools.requests_log import RequestsRead, feed, iter_records

    counts = RequestsRead()
    totals = RequestStats()
    slowest = SlowRequests(threshold_ms, max(0, limit))
    consumers = [c for c, wanted in ((totals.add, stats), (slowest.add, slow)) if wanted]
    feed(iter_records(files, counts, since_s), *consumers)
    source = {
        **_read_facts(counts.read),
        "records": counts.records,
        "bad_lines": counts.bad_lines,
        "bad_examples": counts.bad_examples,
        "before_since": counts.before_window,
    }
    return {"source": source, "stats": totals.summary(since_s), "slow": slowest.summary()}


def make_reports(args: argparse.Namespace) -> dict[str, Any]:
    """The asked-for reports as one JSON-ready dict.

    Raises:
        InputError: a needed file is missing.
    """
    wants_log, wants_requests = args.errors or args.stats, args.slow or args.stats
    log_path, requests_path = args.log, args.requests
    if (wants_log and log_path is None) or (wants_requests and requests_path is None):
        default_log, default_requests = _default_paths()
        log_path = log_path or default_log
        requests_path = requests_path or default_requests
    rotated = not args.no_rotated
    since_s = args.since
    log_files = _family(log_path, rotated) if wants_log else []
    request_files = _family(requests_path, rotated) if wants_requests else []
    if args.errors and not log_files:
        raise InputError(_missing_log(log_path))
    if args.slow and not request_files:
        raise InputError(_missing_requests(requests_path))
    if args.stats and not log_files and not request_files:
        raise InputError(_missing_log(log_path) + "\n" + _missing_requests(requests_path))
    if args.stats and args.log is not None and not log_files:
        raise InputError(_missing_log(log_path))
    if args.stats and args.requests is not None and not request_files:
        raise InputError(_missing_requests(requests_path))
    reports: dict[str, Any] = {}
    window = {"since": epoch_to_iso(since_s)}
    scan = run_log_scan(log_files, args.errors, args.stats, since_s, args.limit) if log_files else None
    reqs = run_requests(request_files, args.slow, args.stats, since_s, args.threshold_ms, args.limit) if (
        request_files
    ) else None  # fmt: skip
    if args.errors and scan is not None:
        reports["errors"] = {**window, "log": scan["source"], **scan["errors"]}
    if args.slow and reqs is not None:
        reports["slow"] = {**window, "requests_log": reqs["source"], **reqs["slow"]}
    if args.stats:
        reports["stats"] = {
            **window,
            "requests": {"requests_log": reqs["source"], **reqs["stats"]} if reqs else None,
            "requests_missing": None if reqs else _missing_requests(requests_path),
            "engine": scan["engine"] if scan else None,
            "log": {
                "log": scan["source"],
                "lines": scan["lines"],
                "http": scan["http"],
                "warnings_and_errors": {k: v for k, v in scan["errors"].items() if k != "groups"},
                "top_problems": scan["errors"]["groups"][:5],
            }
            if scan
            else None,
            "log_missing": None if scan else _missing_log(log_path),
        }
    return reports


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not (args.errors or args.slow or args.stats):
        parser.error("choose a report: --errors, --slow and/or --stats")
    if args.limit < 0:
        parser.error("--limit must be 0 or more")
    try:
        reports = make_reports(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for report in reports.values():
        for source_key in ("log", "requests_log"):
            source = report.get(source_key)
            if isinstance(source, dict):
                for problem in source.get("problems", []):
                    print(f"warning: {problem}", file=sys.stderr)
    if args.json:
        import json

        sys.stdout.write(json.dumps(reports, ensure_ascii=False, indent=2) + "\n")
    else:
        from services.logtools.render import render

        sys.stdout.write(render(reports, tracebacks=args.tracebacks))
    return 0
