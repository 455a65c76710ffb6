"""Per-process bookkeeping of a Locust run: the plan, request tickets, the rows file and the request log.

Used by the locustfile (which only wires Locust to it); plain code, unit-tested without Locust.
"""

from __future__ import annotations

from pathlib import Path

from core.records import RequestRecord
from core.report_schema import BenchmarkConfig
from core.requestlog import RequestLog, RequestLogLine
from loadtest.plan import sampler_for
from loadtest.sessions import Conversation
from loadtest.workload import WorkItem


class RunState:
    """One Locust process's run: the workload of ``plan``, the request budget and where rows go.

    Args:
        plan: the run plan (model, workload, timeouts).
        requests_log: ``logs/requests.jsonl`` (with its rotation); every row is also appended there for the log
            analyzer.
    """

    def __init__(self, plan: BenchmarkConfig, requests_log: RequestLog) -> None:
        self.plan = plan
        self.requests_log = requests_log
        self.workload = sampler_for(plan, plan.seed)
        self.max_requests = 0
        self.issued = 0
        self.finished = 0
        self.records_path: Path | None = None
        self.conversations: dict[int, Conversation] = {}

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

    def next_item(self, user: object) -> WorkItem:
        """The next request of ``user`` (a closed-loop user): the next workload item, or with SESSION_TURNS > 1 the
        next turn of the user's conversation (:mod:`loadtest.sessions`)."""
        if self.plan.session_turns <= 1:
            return self.workload.next()
        conversation = self.conversations.get(id(user))
        if conversation is None:
            conversation = self.conversations[id(user)] = Conversation(self.plan.session_turns, self.workload)
        return conversation.next_item()

    @property
    def all_done(self) -> bool:
        """The budget is spent and every issued request has finished."""
        return bool(self.max_requests) and self.finished >= self.max_requests

    def save(self, record: RequestRecord) -> None:
        """Append one row to the rows file (if any) and to the request log; one write per row, so rows never
        interleave under gevent."""
        self.finished += 1
        if record.error:  # a server may echo what it was sent: the request log's masking applies to rows too
            record = record.model_copy(update={"error": self.requests_log.redact(record.error)})
        if self.records_path is not None:
            with self.records_path.open("a", encoding="utf-8") as fh:
                fh.write(record.model_dump_json() + "\n")
        self.requests_log.append(RequestLogLine.from_record(record, "loadtest", self.plan.model))
