"""Locust entry (wiring only): streamed chat users against vLLM, LLM timings reported as named entries.

Two user classes: ``ChatUser`` (closed loop: each user sends its next request when the previous answer ended) and
``OpenLoopUser`` (one dispatcher sending requests at scheduled Poisson/gamma arrival times, each in its own
greenlet, so a slow server cannot slow the arrivals). Each request is timed by :func:`loadtest.client.stream_chat`;
Locust's statistics get ``LLM e2e``, ``LLM ttft``, ``LLM tpot`` (ms) and ``LLM output_tok/s`` entries through
``events.request`` (Locust's own timer would stop at the response headers of a stream). ``--records-file`` appends
every row as JSON for the report; ``--max-requests`` ends the run after that many requests.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import gevent
import requests
from gevent.pool import Pool
from locust import User, constant, events, task
from locust.env import Environment
from locust.exception import StopUser

from core.records import RequestRecord
from core.requestlog import RequestLogLine, append_request_log, now_iso
from core.settings import get_settings
from loadtest.client import chat_payload, stream_chat
from loadtest.workload import WorkItem, arrival_gaps_s, sampler_for

SETTINGS = get_settings()
OPEN_LOOP_MAX_IN_FLIGHT = 10_000


class RunState:
    """Per-process bookkeeping: workload, request tickets, records file."""

    def __init__(self) -> None:
        self.workload = sampler_for(SETTINGS, SETTINGS.seed)
        self.model = ""
        self.max_requests = 0
        self.issued = 0
        self.finished = 0
        self.records_path: Path | None = None

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
        """Append one row to the records file (if any); one write per row under gevent, so rows never interleave."""
        self.finished += 1
        if self.records_path is not None:
            with self.records_path.open("a", encoding="utf-8") as fh:
                fh.write(record.model_dump_json() + "\n")
        append_request_log(SETTINGS.logs_dir / "requests.jsonl", request_log_line(record, self.model))


STATE = RunState()


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    parser.add_argument("--records-file", default="", env_var="LOCUST_RECORDS_FILE", help="append rows here (JSONL)")
    parser.add_argument("--max-requests", type=int, default=0, env_var="LOCUST_MAX_REQUESTS", help="0 = unlimited")


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    options = environment.parsed_options
    STATE.max_requests = int(getattr(options, "max_requests", 0) or 0)
    STATE.issued = STATE.finished = 0
    records = getattr(options, "records_file", "")
    STATE.records_path = Path(records) if records else None
    STATE.model = discover_model(environment.host or SETTINGS.vllm_url)


def request_log_line(record: RequestRecord, model: str) -> RequestLogLine:
    """The ``logs/requests.jsonl`` line of a load-test request (read by the log analyzer)."""
    return RequestLogLine(
        ts=now_iso(),
        source="loadtest",
        request_id=record.request_id,
        model=model or None,
        prompt_tokens=record.prompt_tokens,
        completion_tokens=record.output_tokens,
        ttft_ms=record.ttft_ms,
        total_ms=record.e2e_ms,
        status="ok" if record.ok else "error",
        error=None if record.ok else f"{record.error_kind}: {record.error}",
    )


def discover_model(base_url: str) -> str:
    """The served model's id from ``/v1/models`` (the configured alias when vLLM does not answer)."""
    try:
        data = requests.get(f"{base_url}/v1/models", timeout=10).json()["data"]
        return str(data[0]["id"])
    except (requests.RequestException, ValueError, KeyError, IndexError):
        return SETTINGS.served_model_name or "unknown"


def send(user: User, session: requests.Session, item: WorkItem, scheduled_at: float | None = None) -> None:
    """Send one request, record it and report its timings to Locust."""
    extra: dict[str, Any] = {}
    if SETTINGS.ignore_eos:
        extra = {"ignore_eos": True, "min_tokens": item.max_tokens}
    payload = chat_payload(STATE.model, item.prompt.messages, item.max_tokens, SETTINGS.temperature, **extra)
    record = stream_chat(session, user.host or SETTINGS.vllm_url, payload, timeout_s=SETTINGS.request_timeout_s)
    record = record.model_copy(
        update={"scheduled_at": scheduled_at, "task": item.prompt.task, "input_bucket": item.prompt.bucket}
    )
    STATE.save(record)
    report_to_locust(user.environment, record)
    if STATE.all_done and user.environment.runner is not None:
        gevent.spawn(user.environment.runner.quit)


def report_to_locust(environment: Environment, record: RequestRecord) -> None:
    """Fire Locust request events for the LLM timings of ``record`` (named entries in the web UI)."""
    fire = environment.events.request.fire
    failure = None if record.ok else Exception(f"{record.error_kind}: {record.error}")
    e2e = (record.e2e_ms or 0.0) + record.queue_delay_ms
    fire(
        request_type="LLM",
        name="e2e",
        response_time=e2e,
        response_length=record.output_tokens or 0,
        exception=failure,
        context={},
    )
    if record.ttft_ms is not None:
        fire(
            request_type="LLM",
            name="ttft",
            response_time=record.ttft_ms + record.queue_delay_ms,
            response_length=0,
            exception=None,
            context={},
        )
    if record.tpot_ms is not None:
        fire(
            request_type="LLM", name="tpot", response_time=record.tpot_ms, response_length=0, exception=None, context={}
        )
    if record.ok and record.output_tokens and record.e2e_ms and record.ttft_ms is not None and record.tpot_ms:
        # Locust shows "response time"; here it carries the request's decode speed in tokens per second.
        fire(
            request_type="LLM",
            name="output_tok/s",
            response_time=1000.0 / record.tpot_ms,
            response_length=record.output_tokens,
            exception=None,
            context={},
        )


class ChatUser(User):
    """Closed loop: sends the next request as soon as the previous answer has ended."""

    wait_time = constant(0)

    def on_start(self) -> None:
        self.session = requests.Session()

    def on_stop(self) -> None:
        self.session.close()

    @task
    def chat(self) -> None:
        if not STATE.take_ticket():
            if STATE.all_done and self.environment.runner is not None:
                gevent.spawn(self.environment.runner.quit)
            raise StopUser()
        send(self, self.session, STATE.workload.next())


class OpenLoopUser(User):
    """Open loop: one dispatcher sends requests at scheduled arrival times (RATE, BURSTINESS), never waiting."""

    fixed_count = 1
    wait_time = constant(0)
    abstract = SETTINGS.rate is None  # without RATE (e.g. the web UI) only the closed-loop ChatUser exists

    @task
    def dispatch(self) -> None:
        assert SETTINGS.rate is not None, "OpenLoopUser needs RATE"
        pool = Pool(OPEN_LOOP_MAX_IN_FLIGHT)
        gaps = arrival_gaps_s(SETTINGS.rate, SETTINGS.burstiness, SETTINGS.seed)
        next_at = time.time()
        while STATE.take_ticket():
            next_at += next(gaps)
            gevent.sleep(max(0.0, next_at - time.time()))
            pool.spawn(self._one, STATE.workload.next(), next_at)
        pool.join()
        if self.environment.runner is not None:
            gevent.spawn(self.environment.runner.quit)
        raise StopUser()

    def _one(self, item: WorkItem, scheduled_at: float) -> None:
        with requests.Session() as session:
            send(self, session, item, scheduled_at)
