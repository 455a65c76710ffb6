"""Per-process bookkeeping of a Locust run: the plan, request tickets, the rows file and the request log.

Used by the locustfile (which only wires Locust to it); plain code, unit-tested without Locust.
"""

from __future__ import annotations

from pathlib import Path

from core.records import RequestRecord
from core.report_schema import BenchmarkConfig
from core.requestlog import RequestLogLine, append_request_log, now_iso
from loadtest.plan import sampler_for


class RunState:
    """One Locust process's run: the workload of ``plan``, the request budget and where rows go.

    Args:
        plan: the run plan (model, workload, timeouts).
        requests_log: ``logs/requests.jsonl``; every row is also appended there for the log analyzer.
    """

    def __init__(self, plan: BenchmarkConfig, requests_log: Path) -> None:
        self.plan = plan
        self.requests_log = requests_log
        self.workload = sampler_for(plan, plan.seed)
        self.max_requests = 0
        self.issued = 0
        self.finished = 0
        self.records_path: Path | None = None

    def begin(self, max_requests: int, records_path: Path | None) -> None:
        """Reset for a new test: ``max_requests`` (0 = unlimited) and the rows file (None = keep none)."""
        self.max_requests = max_requests
        self.issued = self.finished = 0
        self.records_path = records_path

    def take_ticket(self) -> bool:
        """True while the request budget (``--max-requests``) is not spent."""
        if self.max_requests and self.issued >= self.max_requests:
            return False
        self.issued += 1
        return True

    @property
    def all_done(self) -> bool:
        """The budget is spent and every issued request has finished."""
        return bool(self.max_requests) and self.finished >= self.max_requests

    def save(self, record: RequestRecord) -> None:
        """Append one row to the rows file (if any) and to the request log; one write per row, so rows never
        interleave under gevent."""
        self.finished += 1
        if self.records_path is not None:
            with self.records_path.open("a", encoding="utf-8") as fh:
                fh.write(record.model_dump_json() + "\n")
        append_request_log(self.requests_log, RequestLogLine.from_record(record, "loadtest", self.plan.model))

    def log_cut(self, request_id: str, elapsed_ms: float) -> None:
        """Log a request the test's stop cut off after ``elapsed_ms`` as ``cancelled`` in the request log (it is
        not a row: rows hold finished requests)."""
        line = RequestLogLine(
            ts=now_iso(),
            source="loadtest",
            request_id=request_id,
            model=self.plan.model or None,
            prompt_tokens=None,
            completion_tokens=None,
            ttft_ms=None,
            total_ms=round(elapsed_ms, 1),
            status="cancelled",
            error="cut by the test stop",
        )
        append_request_log(self.requests_log, line)
