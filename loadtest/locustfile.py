"""Locust entry (wiring only): the user classes and hooks; the logic is in :mod:`loadtest.driver`,
:mod:`loadtest.runstate`, :mod:`loadtest.locust_events` (one Locust request per chat request),
:mod:`loadtest.llm_stats` (TTFT, TPOT, ITL, tok/s, merged across workers) and :mod:`loadtest.llm_webui` (its tabs).

``ChatUser`` is the closed loop (each user sends its next request when the previous answer ended); ``OpenLoopUser``
is one dispatcher sending at scheduled arrival times. The run plan comes from the benchmark's plan file
(``LOCUST_PLAN_FILE``) or, for the interactive web UI, from the settings and the served model.
``--records-file`` appends every row as JSON; ``--max-requests`` ends the run after that many requests;
``--llm-stats-file`` writes the LLM statistics as JSON when Locust quits (the master's, in distributed mode).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gevent
import requests
from locust import User, constant, events, task
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import WorkerRunner

from core.requestlog import RequestLog
from core.settings import get_settings
from loadtest import llm_webui
from loadtest.client import new_session
from loadtest.driver import dispatch_open_loop, send
from loadtest.llm_stats import REPORT_KEY, LlmStats
from loadtest.locust_events import cut_event, locust_events
from loadtest.models import discover_model
from loadtest.plan import bench_config, read_plan
from loadtest.runstate import RunState
from loadtest.weblogin import install_login
from loadtest.workload import WorkItem

SETTINGS = get_settings()
PLAN = read_plan(SETTINGS.locust_plan_file) if SETTINGS.locust_plan_file else None
STATE: RunState | None = None
LLM = LlmStats()
ENVIRONMENT: Environment | None = None


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    parser.add_argument("--records-file", default="", env_var="LOCUST_RECORDS_FILE", help="append rows here (JSONL)")
    parser.add_argument("--max-requests", type=int, default=0, env_var="LOCUST_MAX_REQUESTS", help="0 = unlimited")
    parser.add_argument(
        "--llm-stats-file", default="", env_var="LOCUST_LLM_STATS_FILE", help="write LLM statistics here (JSON)"
    )


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    global ENVIRONMENT
    ENVIRONMENT = environment
    llm_webui.install(environment, LLM)
    if environment.web_ui is not None and SETTINGS.locust_web_password:  # launched with --web-login
        install_login(
            environment.web_ui,
            SETTINGS.locust_web_username,
            SETTINGS.locust_web_password,
            getattr(environment.parsed_options, "web_base_path", "") or "",
        )


@events.report_to_master.add_listener
def _report_llm_stats(client_id: str, data: dict[str, Any], **_: Any) -> None:
    data[REPORT_KEY] = LLM.report()


@events.worker_report.add_listener
def _merge_llm_stats(client_id: str, data: dict[str, Any], **_: Any) -> None:
    LLM.merge(data.get(REPORT_KEY, {}))


@events.reset_stats.add_listener
def _reset_llm_stats(**_: Any) -> None:
    LLM.clear()


@events.quit.add_listener
def _write_llm_stats(**_: Any) -> None:
    env = ENVIRONMENT
    if env is None or isinstance(env.runner, WorkerRunner):
        return
    elapsed = llm_webui.elapsed_s(env)
    if env.parsed_options is not None and env.parsed_options.headless:
        print(LLM.text_table(elapsed), flush=True)
    path = getattr(env.parsed_options, "llm_stats_file", "")
    if path:
        Path(path).write_text(json.dumps(LLM.snapshot(elapsed), indent=2), encoding="utf-8")


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    global STATE
    options = environment.parsed_options
    host = environment.host or SETTINGS.vllm_url
    plan = PLAN or bench_config(SETTINGS, discover_model(host, SETTINGS.served_model_name, SETTINGS.vllm_headers))
    STATE = STATE if STATE is not None and STATE.plan == plan else RunState(plan, RequestLog.of(SETTINGS))
    records = getattr(options, "records_file", "")
    STATE.begin(int(getattr(options, "max_requests", 0) or 0), Path(records) if records else None)
    LLM.clear()  # Locust clears its request statistics when a test starts


def _state() -> RunState:
    assert STATE is not None, "test_start has not run"
    return STATE


def _record(user: User, item: WorkItem, session: requests.Session, scheduled_at: float | None = None) -> None:
    """Send, report to Locust (a request cut by the test's stop as a failure saying so), and end the run once the
    request budget is spent."""
    fire = user.environment.events.request.fire

    def cut(elapsed_ms: float) -> None:
        LLM.add_cut()
        fire(**cut_event(elapsed_ms))

    record = send(_state(), session, user.host or SETTINGS.vllm_url, item, scheduled_at, on_cut=cut)
    for event in locust_events(record):
        fire(**event)
    LLM.add(record)
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
