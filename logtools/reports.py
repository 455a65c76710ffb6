"""The analyzer's reports as JSON-ready dicts (what ``--json`` prints): one pass over each log serves them all;
modules are imported when needed (start-up time counts)."""

from __future__ import annotations

import os

from core.logfiles import ReadStats, StrPath, rotated_family
from core.parsing import epoch_to_iso

TYPE_CHECKING = False  # typing itself is not imported: start-up time counts (``--errors`` is timed against grep)
if TYPE_CHECKING:
    from typing import Any


class InputError(Exception):
    """Bad input from the user (a needed file is missing); the message says which and what to do."""


class Request:
    """What to report: the parsed command line (:func:`logtools.cli.parse_args`; files None: the settings')."""

    def __init__(self) -> None:
        self.errors = self.slow = self.stats = False
        self.json = self.tracebacks = self.help = False
        self.rotated = True
        self.since_s: float | None = None  # window start, epoch s (None: everything)
        self.threshold_ms = 1000.0
        self.limit = 20
        self.log: str | None = None
        self.requests: str | None = None
        self.logs_dir: str | None = None
        self.every_engine = True  # every vLLM log beside ``log`` (:func:`engine_logs`)


def engine_logs(serving: str) -> list[str]:
    """Every vLLM log beside ``serving`` (``vllm-b.log`` after a switch, ``vllm-1.log`` … of replicas), the serving
    one last."""
    folder = os.path.dirname(serving) or "."
    others = sorted(
        os.path.join(folder, name) for name in os.listdir(folder) if name.startswith("vllm") and name.endswith(".log")
    ) if os.path.isdir(folder) else []  # fmt: skip
    return [p for p in others if os.path.abspath(p) != os.path.abspath(serving)] + [serving]


def missing_log(path: StrPath) -> str:
    """Message for a missing vLLM log (or a folder given as one)."""
    name = os.path.basename(path)
    if os.path.isdir(path):
        example = os.path.join(path, "vllm.log")
        return f"{os.fspath(path)} is a folder: point --log at a vLLM log file in it (e.g. {example})."
    return (
        f"vLLM log not found: {os.fspath(path)} (nor rotated {name}.1, {name}.2.gz, ...). It is written once the "
        "stack runs (`make up`); or point --log at a vLLM log file."
    )


def missing_requests(path: StrPath) -> str:
    """Message for a missing request log."""
    return (
        f"request log not found: {os.fspath(path)}. The chat UI and `make benchmark` write it (one line per "
        "request); send a request first, or point --requests at a requests.jsonl file."
    )


def read_facts(read: ReadStats, skipped: list[str] | None = None) -> dict[str, Any]:
    """Files read, bytes, cut or skipped lines and problems (every field of ``read``), JSON-ready."""
    return {**vars(read), "skipped_older_than_since": skipped or []}


def scan_log(files: list[str], stats: bool, since_s: float | None, limit: int) -> dict[str, Any]:
    """One pass over the vLLM log: error groups always, engine figures and line/HTTP counts when ``stats``."""
    from logtools.groups import ErrorGroups
    from logtools.scan import LogScanner

    groups = ErrorGroups()
    engine = None
    if stats:
        from logtools.aggregate import EngineSummary

        engine = EngineSummary()
    scanner = LogScanner(on_event=groups.add, on_metrics=engine.add_rows if engine else None, since_s=since_s)
    result = scanner.scan(files)
    out: dict[str, Any] = {"source": read_facts(result.read, result.skipped_files), "errors": groups.summary(limit)}
    if engine is not None:
        out.update(engine=engine.summary(), lines=result.lines, http=dict(vars(result.http)))
    return out


def read_requests(files: list[str], since_s: float | None, threshold_ms: float, limit: int) -> dict[str, Any]:
    """One pass over the request log for ``--slow`` and ``--stats``."""
    from logtools.aggregate import RequestsRead, RequestStats, SlowRequests, iter_records

    counts = RequestsRead()
    totals = RequestStats()
    slowest = SlowRequests(threshold_ms, max(0, limit))
    for record in iter_records(files, counts, since_s):
        totals.add(record)
        slowest.add(record)
    source = read_facts(counts.read) | {key: value for key, value in vars(counts).items() if key != "read"}
    return {"source": source, "stats": totals.summary(since_s), "slow": slowest.summary()}


def make_reports(request: Request) -> dict[str, Any]:
    """The asked-for reports keyed by name (``errors``, ``slow``, ``stats``). Raises InputError: a needed file is
    missing (for ``stats``: a file given explicitly, or both defaults)."""
    wants_log, wants_requests = request.errors or request.stats, request.slow or request.stats
    log_path, requests_path = request.log, request.requests
    if (wants_log and log_path is None) or (wants_requests and requests_path is None):
        from core.settings import get_settings  # only then: ~0.3 s

        settings = get_settings()
        log_path = log_path or str(settings.vllm_log_file)
        requests_path = requests_path or str(settings.logs_dir / "requests.jsonl")
    log_path = log_path if log_path is not None else "logs/vllm.log"  # only when not wanted
    requests_path = requests_path if requests_path is not None else "logs/requests.jsonl"

    def family(path: StrPath) -> list[str]:
        if request.rotated:
            return rotated_family(path)
        return [os.fspath(path)] if os.path.isfile(path) else []

    engines = engine_logs(os.fspath(log_path)) if request.every_engine else [os.fspath(log_path)]
    log_files = [f for path in engines for f in family(path)] if wants_log else []
    request_files = family(requests_path) if wants_requests else []
    if not log_files and (request.errors or (request.stats and request.log is not None)):
        raise InputError(missing_log(log_path))
    if not request_files and (request.slow or (request.stats and request.requests is not None)):
        raise InputError(missing_requests(requests_path))
    if request.stats and not log_files and not request_files:
        raise InputError(missing_log(log_path) + "\n" + missing_requests(requests_path))
    since = {"since": epoch_to_iso(request.since_s)}
    scan = scan_log(log_files, request.stats, request.since_s, request.limit) if log_files else None
    reqs = read_requests(request_files, request.since_s, request.threshold_ms, request.limit) if request_files else None
    reports: dict[str, Any] = {}
    if request.errors and scan is not None:
        reports["errors"] = {**since, "log": scan["source"], **scan["errors"]}
    if request.slow and reqs is not None:
        reports["slow"] = {**since, "requests_log": reqs["source"], **reqs["slow"]}
    if request.stats:
        reports["stats"] = {
            **since,
            "requests": {"requests_log": reqs["source"], **reqs["stats"]} if reqs else None,
            "requests_missing": None if reqs else missing_requests(requests_path),
            "engine": scan["engine"] if scan else None,
            "log": None if scan is None else {
                "log": scan["source"],
                "lines": scan["lines"],
                "http": scan["http"],
                "warnings_and_errors": {k: v for k, v in scan["errors"].items() if k != "groups"},
                "top_problems": scan["errors"]["groups"][:5],
            },
            "log_missing": None if scan else missing_log(log_path),
        }  # fmt: skip
    return reports
