"""Locust entry (wiring only): user classes and hooks; the logic lives in the other modules of this package.

``ChatUser`` is the closed loop, ``OpenLoopUser`` one dispatcher per load process sending at scheduled arrival times.
The plan comes from the benchmark's plan file (``LOCUST_PLAN_FILE``, with the run's effective settings), or for the
interactive web UI from the settings and the served model. Options: ``--records-file`` (rows, JSONL),
``--max-requests`` (in all), ``--client-file`` (each process's CPU and lag), ``--llm-stats-file`` (JSON at quit).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

import gevent
from locust import User, constant, events, task
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import WorkerRunner

from core.clientview import ProcessLoad
from core.records import RequestRecord
from core.requestlog import RequestLog
from core.settings import get_settings
from loadgen.childprocs import die_with_parent
from loadgen.locust_side import llm_webui, user_actions
from loadgen.locust_side.joining import host_name
from loadgen.locust_side.llm_stats import REPORT_KEY, LlmStats
from loadgen.locust_side.process_state import LagMonitor, RunState, Slot
from loadgen.locust_side.remote import Coordinator, JoiningCoordinator, append_lines
from loadgen.plan import bench_config, read_run_plan
from loadgen.request.client import new_session
from loadgen.request.transport import Transport
from loadgen.workloads.workload import WorkItem

_PLAN_FILE = get_settings().locust_plan_file
# a benchmark's run: its plan and the run's effective settings (flags included), never another reading of them
_RUN = read_run_plan(_PLAN_FILE) if _PLAN_FILE else None  # the plan file read once, its prompts included
SETTINGS = _RUN.settings if _RUN else get_settings()
PLAN = _RUN.config if _RUN else None
STATE: RunState | None = None
COORD: Coordinator | None = None
MONITOR = LagMonitor(busy=lambda: STATE is not None and STATE.in_flight > 0)
LLM = LlmStats()
ENVIRONMENT: Environment | None = None
HOST = host_name(SETTINGS.load_host_name)


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    parser.add_argument("--records-file", default="", env_var="LOCUST_RECORDS_FILE", help="append rows here (JSONL)")
    parser.add_argument("--max-requests", type=int, default=0, env_var="LOCUST_MAX_REQUESTS", help="0 = unlimited")
    parser.add_argument("--client-file", default="", env_var="LOCUST_CLIENT_FILE", help="append each load "
                        "process's CPU use and event-loop lag here at the end (JSONL)")  # fmt: skip
    parser.add_argument("--llm-stats-file", default="", env_var="LOCUST_LLM_STATS_FILE",
                        help="write LLM statistics here (JSON)")
    parser.add_argument("--join", action="store_true", default=False, env_var="LOCUST_JOIN",
                        help="workers join with the sidecar token, clocks aligned, rows sent to the master "
                        "(EXPECT_WORKERS; loadgen.locust_side.remote)")  # fmt: skip


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    global COORD, ENVIRONMENT
    ENVIRONMENT = environment
    user_actions.cancel_on_sigint(environment, _cut_by_sigint)  # a benchmark stop cancels, a --run-time end drains
    on_slot = lambda slot: _begin(environment, slot)  # noqa: E731
    if getattr(environment.parsed_options, "join", False):
        COORD = JoiningCoordinator(environment, on_slot, token=SETTINGS.sidecar_token or "", host=HOST, plan=PLAN,
                                   expected=int(getattr(environment.parsed_options, "expect_workers", 0) or 0),
                                   timeout_s=SETTINGS.expect_workers_timeout_s)
    else:
        COORD = Coordinator(environment, on_slot)
    if isinstance(environment.runner, WorkerRunner) and getattr(environment.parsed_options, "headless", False):
        die_with_parent()  # a benchmark's worker (--processes) ends with its master, even a SIGKILLed one
    llm_webui.install(environment, LLM)
    if environment.web_ui is not None and SETTINGS.locust_web_password:  # launched with --web-login
        llm_webui.install_login(environment.web_ui, SETTINGS.locust_web_username, SETTINGS.locust_web_password,
                      getattr(environment.parsed_options, "web_base_path", "") or "")


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


def _cut_by_sigint() -> None:
    if STATE is not None:
        STATE.cut_cause = user_actions.CANCEL_CAUSE


def _begin(environment: Environment, slot: Slot) -> None:
    """This process's slot is known: set up its share of the run and start the lag monitor."""
    global STATE
    options = environment.parsed_options
    host = environment.host or getattr(options, "host", None) or SETTINGS.vllm_url
    joined = COORD if isinstance(COORD, JoiningCoordinator) else None
    plan = (joined.plan if joined else None) or PLAN or bench_config(
        SETTINGS, llm_webui.discover_model(host, SETTINGS.served_model_name, SETTINGS.vllm_headers)
    )
    prompts = _RUN.prompts if _RUN and plan == PLAN else None  # the benchmark's one parse of the dataset
    STATE = STATE if STATE is not None and STATE.plan == plan else RunState(plan, RequestLog.of(SETTINGS), prompts)
    role = _coord().role
    STATE.host, STATE.process = HOST, f"{role}{slot.slot if role != 'local' else ''}:{os.getpid()}"
    STATE.sink = joined.send_row if joined and role == "worker" else None
    if joined and role == "worker":
        joined.load_of = lambda: _load_now(role).model_dump_json()
    records = getattr(options, "records_file", "")
    budget = joined.max_requests if joined and role == "worker" else int(getattr(options, "max_requests", 0) or 0)
    STATE.begin(budget, Path(records) if records and not STATE.sink else None, slot)
    MONITOR.start()
    if STATE.budget == 0:  # more processes than requests: this one has none
        _coord().finish()


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    LLM.clear()  # Locust clears its request statistics when a test starts
    _coord().test_start()


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_: Any) -> None:
    coord = _coord()
    coord.test_stop()
    role = coord.role
    if STATE is None or role == "master" or STATE.closed:
        return  # (Locust may fire test_stop twice: the report is written once)
    MONITOR.stop_sampling()
    load = _load_now(role)
    path = getattr(environment.parsed_options, "client_file", "")
    if isinstance(coord, JoiningCoordinator) and role == "worker":
        coord.send_load(load.model_dump_json())  # after its last rows, before Locust reports the worker stopped
    elif path:
        append_lines(path, [load.model_dump_json()])
    STATE.close()


def _load_now(role: Literal["local", "worker"]) -> ProcessLoad:
    """This process's CPU and event-loop lag over its test so far, naming its host."""
    assert STATE is not None
    return MONITOR.summary(role, STATE.slot.slot, STATE.finished).model_copy(update={"host": HOST})


def _coord() -> Coordinator:
    assert COORD is not None, "init has not run"
    return COORD


def _state() -> RunState:
    """This process's run state (a worker waits here until the master has given it its slot)."""
    _coord().ready.wait()
    assert STATE is not None, "test_start has not run"
    return STATE


def _record(user: User, item: WorkItem, session: Transport, scheduled_at: float | None = None) -> RequestRecord:
    """Send, report to Locust (a request cut by the test's stop as a failure saying so), and end this process's part
    once its requests are done."""
    state = _state()
    fire = user.environment.events.request.fire

    def cut(elapsed_ms: float) -> None:
        LLM.add_cut()
        fire(**user_actions.cut_event(elapsed_ms))

    record = user_actions.send(state, session, user.host or SETTINGS.vllm_url, item, scheduled_at, on_cut=cut)
    fire(**user_actions.request_event(record))
    LLM.add(record)
    if state.all_done:
        _coord().finish()
    return record


class ChatUser(User):
    """Closed loop: sends the next request as soon as the previous answer has ended (in a conversation, after the
    user's think time)."""

    wait_time = constant(0)

    def on_start(self) -> None:
        self.session = new_session(headers=SETTINGS.vllm_headers)

    def on_stop(self) -> None:
        self.session.close()

    @task
    def chat(self) -> None:
        state = _state()
        k = state.take_ticket()
        if k is None:
            if state.all_done:
                _coord().finish()
            raise StopUser()
        record = _record(self, state.next_item(self, k), self.session)
        pause = max(user_actions.backoff_s(record), state.think_after(self))  # a conversation: the think time
        if pause:
            gevent.sleep(pause)


class OpenLoopUser(User):
    """Open loop: one dispatcher per load process sends its arrivals at their scheduled times (RATE, BURSTINESS),
    never waiting for answers. Start as many as there are load processes (Locust gives each worker one)."""

    wait_time = constant(0)
    # without RATE only ChatUser exists; a joining worker of another host (LOCUST_JOIN) learns the plan later
    abstract = (PLAN.rate_req_per_sec if PLAN else SETTINGS.rate) is None and os.environ.get("LOCUST_JOIN") != "1"
    _dispatching = False  # one dispatcher per process: a second one here would send the arrivals twice

    @task
    def dispatch(self) -> None:
        if OpenLoopUser._dispatching:
            raise StopUser()
        OpenLoopUser._dispatching = True
        self.session = new_session(user_actions.OPEN_LOOP_MAX_IN_FLIGHT, headers=SETTINGS.vllm_headers)
        try:
            user_actions.dispatch_open_loop(_state(), self._one)
        finally:
            OpenLoopUser._dispatching = False
            self.session.close()
        _coord().finish()
        raise StopUser()

    def _one(self, item: WorkItem, scheduled_at: float) -> None:
        _record(self, item, self.session, scheduled_at)
