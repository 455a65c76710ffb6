"""Locust entry (wiring only): the user classes and hooks; the logic is in :mod:`loadtest.driver`,
:mod:`loadtest.runstate` and :mod:`loadtest.locust_events`.

``ChatUser`` is the closed loop (each user sends its next request when the previous answer ended); ``OpenLoopUser``
is one dispatcher sending at scheduled arrival times. The run plan comes from the benchmark's plan file
(``LOCUST_PLAN_FILE``) or, for the interactive web UI, from the settings and the served model.
``--records-file`` appends every row as JSON; ``--max-requests`` ends the run after that many requests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gevent
import requests
from locust import User, constant, events, task
from locust.env import Environment
from locust.exception import StopUser

from core.requestlog import RequestLog
from core.settings import get_settings
from loadtest.client import new_session
from loadtest.driver import dispatch_open_loop, send
from loadtest.locust_events import locust_events
from loadtest.models import discover_model
from loadtest.plan import bench_config, read_plan
from loadtest.runstate import RunState
from loadtest.weblogin import install_login
from loadtest.workload import WorkItem

SETTINGS = get_settings()
PLAN = read_plan(SETTINGS.locust_plan_file) if SETTINGS.locust_plan_file else None
STATE: RunState | None = None


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    parser.add_argument("--records-file", default="", env_var="LOCUST_RECORDS_FILE", help="append rows here (JSONL)")
    parser.add_argument("--max-requests", type=int, default=0, env_var="LOCUST_MAX_REQUESTS", help="0 = unlimited")


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    if environment.web_ui is not None and SETTINGS.locust_web_password:  # launched with --web-login
        install_login(
            environment.web_ui,
            SETTINGS.locust_web_username,
            SETTINGS.locust_web_password,
            getattr(environment.parsed_options, "web_base_path", "") or "",
        )


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    global STATE
    options = environment.parsed_options
    host = environment.host or SETTINGS.vllm_url
    plan = PLAN or bench_config(SETTINGS, discover_model(host, SETTINGS.served_model_name, SETTINGS.vllm_headers))
    STATE = STATE if STATE is not None and STATE.plan == plan else RunState(plan, RequestLog.of(SETTINGS))
    records = getattr(options, "records_file", "")
    STATE.begin(int(getattr(options, "max_requests", 0) or 0), Path(records) if records else None)


def _state() -> RunState:
    assert STATE is not None, "test_start has not run"
    return STATE


def _record(user: User, item: WorkItem, session: requests.Session, scheduled_at: float | None = None) -> None:
    """Send, report to Locust, and end the run once the request budget is spent."""
    record = send(_state(), session, user.host or SETTINGS.vllm_url, item, scheduled_at)
    for event in locust_events(record):
        user.environment.events.request.fire(**event)
    if _state().all_done and user.environment.runner is not None:
        gevent.spawn(user.environment.runner.quit)


class ChatUser(User):
    """Closed loop: sends the next request as soon as the previous answer has ended."""

    wait_time = constant(0)

    def on_start(self) -> None:
        self.session = new_session(SETTINGS.vllm_headers)

    def on_stop(self) -> None:
        self.session.close()

    @task
    def chat(self) -> None:
        if not _state().take_ticket():
            if _state().all_done and self.environment.runner is not None:
                gevent.spawn(self.environment.runner.quit)
            raise StopUser()
        _record(self, _state().next_item(self), self.session)


class OpenLoopUser(User):
    """Open loop: one dispatcher sends requests at scheduled arrival times (RATE, BURSTINESS), never waiting."""

    fixed_count = 1
    wait_time = constant(0)
    abstract = (PLAN.rate_req_per_sec if PLAN else SETTINGS.rate) is None  # without RATE only ChatUser exists

    @task
    def dispatch(self) -> None:
        dispatch_open_loop(_state(), self._one)
        if self.environment.runner is not None:
            gevent.spawn(self.environment.runner.quit)
        raise StopUser()

    def _one(self, item: WorkItem, scheduled_at: float) -> None:
        with new_session(SETTINGS.vllm_headers) as session:
            _record(self, item, session, scheduled_at)
