"""Locust entry (wiring only): streamed chat users against vLLM, LLM timings reported as named entries.

Each request is timed by :func:`loadtest.client.stream_chat`; Locust's statistics get ``LLM e2e`` and
``LLM ttft`` entries through ``events.request`` (Locust's own timer would stop at the response headers of a
stream). With ``--records-file`` every row is also appended as JSON for the report; with ``--max-requests`` the
run ends after that many requests.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import gevent
import requests
from locust import User, constant, events, task
from locust.env import Environment
from locust.exception import StopUser

from loadtest.client import chat_payload, stream_chat
from loadtest.dataset import load_jsonl_prompts, prompt_stream
from loadtest.records import RequestRecord
from services.settings import get_settings

SETTINGS = get_settings()


class RunState:
    """Per-process bookkeeping: prompt order, request tickets, records file."""

    def __init__(self) -> None:
        prompts, _ = load_jsonl_prompts(SETTINGS.prompts_file)
        self.prompts = prompt_stream(prompts, SETTINGS.seed)
        self.model = ""
        self.max_requests = 0
        self.issued = 0
        self.finished = 0
        self.records_path: Path | None = None
        self._lock = threading.Lock()

    def take_ticket(self) -> bool:
        """True while the request budget (``--max-requests``) is not spent."""
        if self.max_requests and self.issued >= self.max_requests:
            return False
        self.issued += 1
        return True

    def save(self, record: RequestRecord) -> None:
        """Append one row to the records file (if any)."""
        self.finished += 1
        if self.records_path is not None:
            with self._lock, self.records_path.open("a", encoding="utf-8") as fh:
                fh.write(record.model_dump_json() + "\n")


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


def discover_model(base_url: str) -> str:
    """The served model's id from ``/v1/models`` (the configured alias when vLLM does not answer)."""
    try:
        data = requests.get(f"{base_url}/v1/models", timeout=10).json()["data"]
        return str(data[0]["id"])
    except (requests.RequestException, ValueError, KeyError, IndexError):
        return SETTINGS.served_model_name or "unknown"


class ChatUser(User):
    """A closed-loop user: sends the next prompt as soon as the previous answer has ended."""

    wait_time = constant(0)

    def on_start(self) -> None:
        self.session = requests.Session()

    def on_stop(self) -> None:
        self.session.close()

    @task
    def chat(self) -> None:
        if not STATE.take_ticket():
            if STATE.finished >= STATE.max_requests and self.environment.runner is not None:
                gevent.spawn(self.environment.runner.quit)
            raise StopUser()
        prompt = next(STATE.prompts)
        payload = chat_payload(STATE.model, prompt.messages, SETTINGS.max_tokens, SETTINGS.temperature)
        record = stream_chat(
            self.session, self.host or SETTINGS.vllm_url, payload, timeout_s=SETTINGS.request_timeout_s
        )
        STATE.save(record)
        fire = self.environment.events.request.fire
        failure = None if record.ok else Exception(f"{record.error_kind}: {record.error}")
        fire(
            request_type="LLM",
            name="e2e",
            response_time=record.e2e_ms or 0.0,
            response_length=record.output_tokens or 0,
            exception=failure,
            context={},
        )
        if record.ttft_ms is not None:
            fire(
                request_type="LLM",
                name="ttft",
                response_time=record.ttft_ms,
                response_length=0,
                exception=None,
                context={},
            )
        if STATE.max_requests and STATE.finished >= STATE.max_requests and self.environment.runner is not None:
            gevent.spawn(self.environment.runner.quit)
