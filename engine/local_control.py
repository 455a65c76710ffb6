"""Engine control in local mode: the :class:`core.enginestate.EngineControl` of a vLLM run by the project's supervisord.

A restart with other arguments writes ``run/engine_request.json`` (read by the launcher on its next start), restarts
the engine's program and waits until vLLM answers.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import subprocess
import time
import xmlrpc.client
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from supervisor.xmlrpc import SupervisorTransport, UnixStreamHTTPConnection

from core.enginestate import (
    EngineError,
    EngineRequest,
    EngineStatus,
    LogPosition,
    log_position,
    read_engine_state,
    read_request,
    write_request,
)
from core.net import wait_for_http
from core.replicas import replicas
from core.settings import PROJECT_ROOT, Settings
from core.slots import active_slot
from engine.bluegreen import Programs, Swapped, switch_replica
from engine.enginephase import DEAD_STATES, engine_process, failure_report, launch_phase
from engine.local_replicas import ROUTER_PROGRAM, program_name, program_names
from engine.reaper import end_engine_processes, engine_processes
from engine.vllmlog.tracker import StartupPhase

PROGRAM = "vllm"
FAILED_STATES = DEAD_STATES | {"UNKNOWN"}


SETTLE_S = 3.0  # how long a restart lets a stopped vLLM's children exit by themselves before ending them
SUPERVISOR_TIMEOUT_S = 10.0  # a loaded host's supervisord answers within this; later reads as "not answering"


class SupervisorNotAnswering(EngineError):
    """supervisord runs (its socket is there) but did not answer in time: states unknown."""


class _TimedUnixConnection(UnixStreamHTTPConnection):
    """supervisor's unix-socket HTTP connection with a timeout (theirs has none)."""

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socketfile)


class _TimedTransport(SupervisorTransport):
    def __init__(self, socket_path: Path, timeout_s: float | None) -> None:
        super().__init__(None, None, f"unix://{socket_path}")

        def connection() -> _TimedUnixConnection:
            conn = _TimedUnixConnection("localhost", timeout=timeout_s)
            conn.socketfile = str(socket_path)
            return conn

        self._get_connection = connection


class Supervisor:
    """XML-RPC client of the stack's supervisord (its socket in RUN_DIR), reading states within ``timeout_s``."""

    def __init__(self, run_dir: Path, timeout_s: float = SUPERVISOR_TIMEOUT_S) -> None:
        self.socket = run_dir.resolve() / "supervisor.sock"
        self.pid_file = run_dir / "supervisord.pid"
        self.timeout_s = timeout_s

    def alive(self) -> bool:
        """supervisord's process (its pid file in RUN_DIR) is alive: serving, or still stopping."""
        try:
            return psutil.Process(int(self.pid_file.read_text().strip())).status() != psutil.STATUS_ZOMBIE
        except (OSError, ValueError, psutil.Error):
            return False

    def proxy(self, timeout_s: float | None = None) -> Any:
        """A ServerProxy over the unix socket (one per call); calls wait at most ``timeout_s`` (None: no limit)."""
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=_TimedTransport(self.socket, timeout_s))

    def states(self) -> dict[str, dict[str, Any]] | None:
        """``{program: info}`` from supervisord, or None when it is not running.

        Raises:
            SupervisorNotAnswering: it did not answer within ``timeout_s`` s.
        """
        try:
            return {p["name"]: p for p in self.proxy(self.timeout_s).supervisor.getAllProcessInfo()}
        except TimeoutError as exc:
            raise SupervisorNotAnswering(
                f"supervisord not answering (timeout after {self.timeout_s:g} s on {self.socket}): it runs but is "
                "busy; try again in a moment"
            ) from exc
        except (OSError, xmlrpc.client.Error):
            return None


def known_states(supervisor: Supervisor) -> dict[str, dict[str, Any]]:
    """``supervisor.states()``, empty when supervisord is not running or not answering."""
    try:
        return supervisor.states() or {}
    except SupervisorNotAnswering:
        return {}


def engine_phase(
    settings: Settings, since: LogPosition | None = None, supervisor: Supervisor | None = None
) -> StartupPhase:
    """vLLM's start-up phase judged with its process (:func:`engine.enginephase.launch_phase`): the state
    file and supervisord's view of the engine's program. ``since``: only the launch whose lines begin there."""
    states = known_states(supervisor or Supervisor(settings.run_dir))
    state = read_engine_state(settings.engine_state_file)
    process = engine_process(state, states.get(own_program(settings)))
    return launch_phase(settings.vllm_log_file, state, since, process)


def own_program(settings: Settings) -> str:
    """The engine's supervisord program: ENGINE_REPLICA in ENGINE_SLOT, else the slot serving now."""
    replica = settings.engine_replica
    return program_name(replica, settings.engine_slot or active_slot(settings.run_dir, replica))


def why_not_up(settings: Settings, since: LogPosition | None, supervisor: Supervisor | None = None) -> str:
    """The failure report of a launch that did not come up: its error line and last log lines."""
    phase = engine_phase(settings, since, supervisor)
    for _ in range(4):  # supervisord may write vLLM's last lines a moment after it saw the process exit
        if phase.error_line is not None:
            break
        time.sleep(0.5)
        phase = engine_phase(settings, since, supervisor)
    return failure_report(settings.vllm_log_file, phase, since)


class LocalEngine:
    """:class:`core.enginestate.EngineControl` for every local engine under supervisord (the router runs on)."""

    def __init__(self, settings: Settings, supervisor: Supervisor | None = None) -> None:
        self.settings = settings
        self.supervisor = supervisor or Supervisor(settings.run_dir)

    @property
    def programs(self) -> list[str]:
        """The programs of the engines that serve now."""
        return program_names(self.settings)

    def _states(self, states: dict[str, dict[str, Any]]) -> dict[str, str]:
        return {name: states.get(name, {}).get("statename", "UNKNOWN") for name in self.programs}

    def status(self) -> EngineStatus | None:
        """vLLM's supervisor state (with replicas: RUNNING when all run, else the first other one,
        ``vllm-1 EXITED``) and its request; None when supervisord is not running.

        Raises:
            SupervisorNotAnswering: supervisord did not answer in time.
        """
        states = self.supervisor.states()
        if states is None:
            return None
        mine = self._states(states)
        odd = [(name, state) for name, state in mine.items() if state not in ("RUNNING", "STARTING")]
        state = (odd[0][1] if len(mine) == 1 else f"{odd[0][0]} {odd[0][1]}") if odd else "RUNNING"
        request = read_request(self.settings.engine_request_file)
        return EngineStatus(running=not odd, state=state, request=request)

    def _require(self) -> EngineStatus:
        status = self.status()
        if status is None:
            raise EngineError("the local stack is not running (supervisord does not answer); `make up` first")
        return status

    def _wait(self, since: LogPosition | None) -> None:
        """Wait until vLLM answers; EngineError with :func:`why_not_up` when its process died or time ran out."""

        def dead() -> str | None:
            states = self._states(known_states(self.supervisor))  # not answering is not dead
            failed = [(name, state) for name, state in states.items() if state in FAILED_STATES]
            if len(states) == 1 and failed:
                return f"vLLM is {failed[0][1]}"
            return "; ".join(f"{name} is {state}" for name, state in failed) or None

        urls = [r.url for r in replicas(self.settings) if r.local] + [self.settings.vllm_url]
        for url in dict.fromkeys(urls):  # every replica, then the router in front of them (one URL without it)
            if url == self.settings.vllm_url and len(urls) > 1:
                self._restart_router()
            ok, why = wait_for_http(f"{url}/v1/models", self.settings.startup_timeout_s, abort=dead,
                                    headers=self.settings.vllm_headers)  # fmt: skip
            if not ok:
                raise EngineError(f"{why}\n{why_not_up(self.settings, since, self.supervisor)}")

    def _restart_router(self) -> None:
        """Restart the router: vllm-router keeps a worker that failed while restarting out of rotation."""
        if ROUTER_PROGRAM not in (self.supervisor.states() or {}):
            return
        rpc = self.supervisor.proxy().supervisor
        with contextlib.suppress(xmlrpc.client.Fault):  # not running: nothing to stop
            rpc.stopProcess(ROUTER_PROGRAM)
        rpc.startProcess(ROUTER_PROGRAM, False)

    def start(self) -> None:
        """Start vLLM when it is not running and wait until it answers."""
        since = None
        self._require()
        states = self._states(self.supervisor.states() or {})
        for name, state in states.items():
            if state not in ("RUNNING", "STARTING"):
                if name == own_program(self.settings):
                    since = log_position(self.settings.vllm_log_file)  # this launch's lines begin here
                self.supervisor.proxy().supervisor.startProcess(name, False)
        self._wait(since)

    def stop(self) -> None:
        """Stop vLLM (its process group; every local replica's)."""
        self._require()
        for name, state in self._states(self.supervisor.states() or {}).items():
            if state in ("RUNNING", "STARTING"):
                self.supervisor.proxy().supervisor.stopProcess(name)

    def restart(self, request: EngineRequest) -> None:
        """Restart vLLM with ``request`` and wait until it answers (down meanwhile, unlike :meth:`switch`)."""
        self._require()
        for replica in replicas(self.settings):
            if replica.index is not None:
                write_request(self.settings.model_copy(update={"engine_replica": replica.index}).engine_request_file,
                              request)  # fmt: skip
        self.stop()
        # every local engine is stopped now: what still carries this stack's marker is a crashed vLLM's orphan (an
        # engine core left by a SIGKILLed API server holds its memory, GPU memory included): ended before the start
        deadline = time.monotonic() + SETTLE_S  # a stopped vLLM's children may still be exiting by themselves
        while engine_processes(self.settings.run_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        leftovers = end_engine_processes(self.settings.run_dir)
        if leftovers.found:
            print(f"[INFO] Ended {len(leftovers.found)} process(es) an earlier vLLM left behind "
                  f"({', '.join(map(str, leftovers.found))})", flush=True)  # fmt: skip
        self.start()

    def switch(self, request: EngineRequest, say: Callable[[str], None] = print) -> list[Swapped]:
        """Replace every local engine by one started with ``request``, one replica at a time
        (:func:`engine.bluegreen.switch_replica`); the swaps done, in order.

        Raises:
            EngineError: a new engine did not come up (replicas swapped before it serve the new request), or the
                router refused a swap.
        """
        self._require()
        programs = Programs(self.supervisor)
        failure = functools.partial(why_not_up, supervisor=self.supervisor)
        local = [r.index for r in replicas(self.settings) if r.index is not None]
        return [switch_replica(self.settings, index, request, programs, failure, say) for index in local]


class ComposeEngine:
    """:class:`core.enginestate.EngineControl` for the compose stack's ``vllm`` service (recreated alone)."""

    def __init__(self, settings: Settings, compose: tuple[str, ...] = ("docker", "compose")) -> None:
        self.settings = settings
        self.compose = compose

    def _run(self, *args: str, env: dict[str, str] | None = None, timeout_s: float = 60) -> str | None:
        """``docker compose ARGS``'s stdout, or None when compose or its engine failed."""
        try:
            done = subprocess.run(
                [*self.compose, *args],
                cwd=PROJECT_ROOT,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env={**os.environ, **(env or {})},
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    def status(self) -> EngineStatus | None:
        """RUNNING when the compose project has a running ``vllm`` container; None when there is no compose stack."""
        out = self._run("ps", "--status", "running", "--quiet", PROGRAM, timeout_s=20)
        if not out or not out.strip():
            return None
        return EngineStatus(running=True, state="RUNNING")

    def start(self) -> None:
        """``docker compose up -d vllm``, then wait until it answers."""
        if self._run("up", "-d", "--no-deps", PROGRAM, timeout_s=600) is None:
            raise EngineError("docker compose up vllm failed; see `docker compose logs vllm`")
        self._wait()

    def stop(self) -> None:
        """``docker compose stop vllm``."""
        if self._run("stop", PROGRAM, timeout_s=120) is None:
            raise EngineError("docker compose stop vllm failed")

    def restart(self, request: EngineRequest) -> None:
        """Recreate only ``vllm`` with the request's model and wait until it answers."""
        knobs = dict(request.knobs)
        served = knobs.pop("served_model_name", None)  # the compose file passes SERVED_MODEL_NAME on, as MODEL
        if knobs:  # compose hands the container only the variables its file names
            names = ", ".join(f"{name.upper()}={value}" for name, value in knobs.items())
            raise EngineError(f"the compose stack takes {names} from .env (or APP_ENV_FILE): set them there and run "
                              "`docker compose up -d --force-recreate vllm` (only MODEL, SERVED_MODEL_NAME and "
                              "VLLM_EXTRA_ARGS switch here)")
        env = {"MODEL": request.model} if request.model else {}
        if served is not None:
            env["SERVED_MODEL_NAME"] = str(served)
        if request.vllm_extra_args is not None:
            env["VLLM_EXTRA_ARGS"] = request.vllm_extra_args
        if self._run("up", "-d", "--no-deps", "--force-recreate", PROGRAM, env=env, timeout_s=600) is None:
            raise EngineError("docker compose up --force-recreate vllm failed; see `docker compose logs vllm`")
        self._wait()

    def _wait(self) -> None:
        ok, why = wait_for_http(
            f"{self.settings.vllm_url}/v1/models", self.settings.startup_timeout_s, headers=self.settings.vllm_headers
        )
        if not ok:
            raise EngineError(why)
