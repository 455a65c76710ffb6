"""Command line of the log analyzer: ``python -m logtools --errors|--slow|--stats [options]``; exit 0 done, 2 bad
input. Parsed with ``getopt`` (argparse costs ~10 ms of ``--errors``' ~0.1 s), or without (:func:`_whole_names`)."""

from __future__ import annotations

import os
import sys

from core.parsing import SINCE_HELP, parse_since
from core.pipes import guard_stdout
from logtools.reports import InputError, Request, make_reports

USAGE = f"""\
usage: ./log_analyze.sh --errors|--slow|--stats [--json] [--since WHEN] [--threshold-ms MS]
                          [--limit N] [--tracebacks] [--log FILE] [--requests FILE] [--logs-dir DIR] [--no-rotated]
       (also python -m logtools and make logs-errors | logs-slow | logs-stats)

Errors, slow requests and stats from logs/vllm.log and logs/requests.jsonl (rotated .1, .2.gz files included).

reports (one or more):
  --errors           WARNING/ERROR lines and tracebacks, grouped and counted
  --slow             requests slower than --threshold-ms, slowest first
  --stats            requests, error rate, latency percentiles, tokens/s; the engine's throughput and KV cache lines
options:
  --json             print one JSON object keyed by report name instead of text
  --since WHEN       only what happened since WHEN: {SINCE_HELP}
  --threshold-ms MS  --slow threshold in milliseconds (default 1000)
  --limit N          error groups / slow requests listed (default 20)
  --tracebacks       print each error group's example traceback
  --log FILE         vLLM log (default: every vLLM log in the settings' LOGS_DIR, i.e. logs/vllm.log and, after a
                     model switch or with replicas, logs/vllm-b.log, logs/vllm-1.log, ...)
  --requests FILE    request log (default: requests.jsonl in LOGS_DIR)
  --logs-dir DIR     where the two logs are (default: the settings' LOGS_DIR, i.e. logs/)
  --no-rotated       read only the given files, not FILE.1, FILE.2.gz, ...
  -h, --help         show this help and exit
"""
_LONG = ["errors", "slow", "stats", "json", "since=", "threshold-ms=", "limit=", "tracebacks", "log=", "requests="]
_LONG += ["no-rotated", "help", "logs-dir="]
_FLAGS = {"--" + name for name in _LONG if not name.endswith("=")}
_VALUED = {"--" + name[:-1] for name in _LONG if name.endswith("=")}


class UsageError(Exception):
    """A bad command line; the message says what is wrong."""


def _number(option: str, value: str, kind: type[float] | type[int], example: str) -> float:
    try:
        return kind(value)
    except ValueError:
        raise UsageError(f"{option} {value!r} is not a number; e.g. {option} {example}") from None


def parse_args(argv: list[str]) -> Request:
    """Parse ``argv`` (without the program name). Raises UsageError: unknown option, missing value, unparsable
    ``--since``/number, stray argument or no report."""
    own = {"--" + name.rstrip("=") for name in _LONG} | {"-h"}
    if any(a.startswith("--") and a.split("=", 1)[0] not in own for a in argv):
        from core.flags import refusal  # only then: the settings cost start-up time

        problem = refusal(argv, own)  # a knob of another command (--slo is not --slow), or a misspelt option
        if problem:
            raise UsageError(problem)
    pairs, rest = _whole_names(argv) or _getopt(argv)
    if rest:
        raise UsageError(f"unexpected argument {rest[0]!r} (files go after --log or --requests)")
    options = Request()
    for option, value in pairs:
        name = option.lstrip("-").replace("-", "_")
        if option in ("-h", "--help"):
            options.help = True
        elif option in ("--errors", "--slow", "--stats", "--json", "--tracebacks"):
            setattr(options, name, True)
        elif option == "--no-rotated":
            options.rotated = False
        elif option == "--since":
            try:
                options.since_s = parse_since(value)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        elif option == "--threshold-ms":
            options.threshold_ms = _number(option, value, float, "1000")
            if not 0 < options.threshold_ms < float("inf"):
                raise UsageError(f"--threshold-ms {value!r}: expected a positive number of milliseconds, e.g. 1000")
        elif option == "--limit":
            options.limit = int(_number(option, value, int, "20"))
            if options.limit < 0:
                raise UsageError(f"--limit {value!r}: expected 0 or more")
        elif option in ("--log", "--requests", "--logs-dir"):
            if not value:
                raise UsageError(f"{option} needs a file name")
            setattr(options, name, value)
    if not (options.help or options.errors or options.slow or options.stats):
        raise UsageError("choose a report: --errors, --slow and/or --stats")
    options.every_engine = options.log is None  # --logs-dir alone: every vLLM log there, as by default
    if options.logs_dir:  # the folder of both logs unless --log or --requests name a file
        options.log = options.log or os.path.join(options.logs_dir, "vllm.log")
        options.requests = options.requests or os.path.join(options.logs_dir, "requests.jsonl")
    return options


def _whole_names(argv: list[str]) -> tuple[list[tuple[str, str]], list[str]] | None:
    """What ``getopt.gnu_getopt`` makes of whole long option names, without importing it (~1 ms of ``gettext``);
    None for anything else, which :func:`_getopt` parses."""
    pairs = []
    index = 0
    while index < len(argv):
        name, equals, value = argv[index].partition("=")
        index += 1
        if name in _FLAGS and not equals:
            value = ""
        elif name in _VALUED and not equals:
            if index == len(argv):
                return None
            value = argv[index]
            index += 1
        elif name not in _VALUED:
            return None
        pairs.append((name, value))
    return pairs, []


def _getopt(argv: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """``getopt.gnu_getopt`` of ``argv``. Raises UsageError: what getopt found wrong (unknown or ambiguous option,
    missing or unexpected value)."""
    import getopt

    try:
        return getopt.gnu_getopt(argv, "h", _LONG)
    except getopt.GetoptError as exc:
        raise UsageError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 done, 2 bad input)."""
    guard_stdout()
    try:
        options = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        usage = "".join(USAGE.splitlines(keepends=True)[:2])
        print(f"error: {exc}\n{usage}(./log_analyze.sh --help for more)", file=sys.stderr)
        return 2
    if options.help:
        sys.stdout.write(USAGE)
        return 0
    try:
        reports = make_reports(options)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for report in reports.values():
        for key in ("log", "requests_log"):
            source = report.get(key)
            if isinstance(source, dict):
                for problem in source.get("problems", []):
                    print(f"warning: {problem}", file=sys.stderr)
    if options.json:
        import json

        sys.stdout.write(json.dumps(reports, ensure_ascii=False, indent=2) + "\n")
    else:
        from logtools.render import render

        sys.stdout.write(render(reports, tracebacks=options.tracebacks))
    return 0
