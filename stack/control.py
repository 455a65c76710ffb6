"""Local-mode control of the stack under supervisord: ``python -m stack.control up|down|status|token``.

``up`` checks the ports, prepares the model, starts supervisord (deploy/supervisord.conf) and returns once every
service answers, or stops everything and shows the failing service's log. ``down`` stops supervisord, its children
and whatever a crashed vLLM left behind (:mod:`engine.reaper`); the services are :mod:`stack.services`.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import xmlrpc.client
from typing import Any

from core.enginestate import (
    EngineError,
    EngineRequest,
    LogPosition,
    log_position,
    pid_namespace,
    read_engine_state,
    read_request,
    write_request,
)
from core.envtypos import env_typos
from core.logfiles import log_tail
from core.net import port_in_use_message
from core.pipes import guard_stdout
from core.redact import Redactor, secret_values
from core.replicas import as_started, check_cluster, cluster_record, record_cluster, replicas
from core.settings import PROJECT_ROOT, Settings, ensure_sidecar_token, get_settings
from core.slots import clear_slots
from core.units import MIB
from engine.engineplan import engine_build
from engine.local_control import (
    FAILED_STATES,
    LocalEngine,
    Supervisor,
    SupervisorNotAnswering,
    engine_phase,
    own_program,
    why_not_up,
)
from engine.local_replicas import ROUTER_PROGRAM, program_names, write_conf
from engine.reaper import end_engine_processes
from engine.vllmlog.startup import latest_start, phases_line
from sidecar.reports.envinfo import startup_facts
from stack.services import answers, programs, services, serving_line, starting_beside, startup_times_line

CONF = PROJECT_ROOT / "deploy" / "supervisord.conf"


def failed(code: int, *lines: str) -> int:
    """Print each of ``lines`` as ``[ERROR] line`` on stderr; return ``code``, the command's exit status."""
    print("".join(f"[ERROR] {line}\n" for line in lines), end="", file=sys.stderr)
    return code


def supervisor_env(settings: Settings) -> dict[str, str]:
    """Environment for supervisord and its services: absolute paths and vllm.log's rotation."""
    env = dict(os.environ)
    env.update(
        PROJECT_ROOT=str(PROJECT_ROOT),
        LOGS_DIR=str(settings.logs_dir.resolve()),
        REPORTS_DIR=str(settings.reports_dir.resolve()),
        STACK_RUN_DIR=str(settings.run_dir.resolve()),
        APP_PYTHON=sys.executable,
        PYTHONUNBUFFERED="1",
        STACK_VLLM_LOG_MAX_BYTES=str(int(settings.vllm_log_max_mb * MIB)),
        STACK_VLLM_LOG_BACKUPS=str(settings.vllm_log_backups),
    )
    return env


def process_states(settings: Settings) -> dict[str, dict[str, Any]] | None:
    """``{name: info}`` from supervisord, or None when it is not running.

    Raises:
        SupervisorNotAnswering: it runs but did not answer in time.
    """
    return Supervisor(settings.run_dir).states()


def states_now(settings: Settings) -> dict[str, dict[str, Any]]:
    """:func:`process_states`, empty when supervisord is not running or not answering."""
    try:
        return process_states(settings) or {}
    except SupervisorNotAnswering:
        return {}


EXIT_NOT_RUNNING = 3  # make status: no supervisord
EXIT_NOT_ANSWERING = 4  # make status: supervisord runs but did not answer in time


def rpc(settings: Settings) -> Any:
    """XML-RPC proxy to the running supervisord (its unix socket)."""
    return Supervisor(settings.run_dir).proxy()


def wait_ready(settings: Settings, since: LogPosition | None = None) -> tuple[bool, str]:
    """Wait until every service answers; fail fast when supervisord reports one dead (for vLLM with
    :func:`~engine.local_control.why_not_up`). ``since``: where the awaited launch begins in vLLM's log."""
    deadline = time.monotonic() + settings.startup_timeout_s
    pending = programs(settings)
    last_note = 0.0
    while pending and time.monotonic() < deadline:
        states = states_now(settings)
        for svc in list(pending):
            state = states.get(svc.name, {}).get("statename", "UNKNOWN")
            if state in FAILED_STATES and svc.name == "vllm":
                return False, f"{svc.name} is {state}: {why_not_up(settings, since)}"
            if state in FAILED_STATES:
                return False, f"{svc.name} is {state}. Last lines of {svc.log}:\n{log_tail(svc.log, 25, missing='')}"
            if answers(svc.url, svc.headers):
                print(f"[INFO] {svc.name} ready ({svc.url})", flush=True)
                pending.remove(svc)
        if pending and time.monotonic() - last_note > 30:
            last_note = time.monotonic()
            phase = engine_phase(settings, since).detail if any(s.name == "vllm" for s in pending) else ""
            print(
                f"[INFO] waiting for {', '.join(s.name for s in pending)}"
                + (f" (vLLM: {phase})" if phase else "")
                + f" — logs in {settings.logs_dir}/",
                flush=True,
            )
        time.sleep(1.0)
    if pending:
        names = ", ".join(s.name for s in pending)
        return False, f"{names} not ready after {settings.startup_timeout_s:.0f} s; see {pending[0].log}"
    return True, ""


def up(settings: Settings, request: EngineRequest | None = None) -> int:
    """Start the stack and wait for it; 0 when everything answers. ``request``: what vLLM's first launch changes
    (``./start_vllm.sh`` with no stack running)."""
    cluster_error = check_cluster(settings)
    if cluster_error:
        return failed(2, cluster_error)
    ports = [(s.port, s.port_var) for s in services(settings)]
    clashes = sorted({f"{a[1]}={a[0]} and {b[1]}" for a in ports for b in ports if a[0] == b[0] and a[1] < b[1]})
    if clashes:
        return failed(2, f"Two services would share a port: {'; '.join(clashes)}. Give each its own port.")
    try:
        states = process_states(settings)
    except SupervisorNotAnswering as exc:  # it runs: starting a second one would clash
        return failed(1, str(exc))
    if states is not None:
        return resume(settings, states)
    clear_slots(settings.run_dir)  # every replica starts in slot a
    record_cluster(as_started(settings))  # later commands, and the checks below, see these replicas and the front
    code = start_fresh(settings, request)
    if code != 0 and not states_now(settings):  # nothing runs: no stack for later commands to see
        cluster_record(settings).unlink(missing_ok=True)
    return code


def start_fresh(settings: Settings, request: EngineRequest | None) -> int:
    """:func:`up` without a running supervisord: check ports, prepare the model, start and wait."""
    busy = [m for s in services(settings) if (m := port_in_use_message(s.host, s.port, s.port_var))]
    if busy:
        return failed(2, *busy)
    for folder in (settings.logs_dir, settings.reports_dir, settings.run_dir):
        folder.mkdir(parents=True, exist_ok=True)
    try:
        ensure_sidecar_token(settings)  # the sidecar's write token (run/sidecar_token, 0600), made once
    except OSError as exc:
        return failed(2, f"cannot make the sidecar token {settings.sidecar_token_path}: {exc}")
    for index in range(as_started(settings).replicas):  # default: MODEL, unprofiled
        replica = settings.model_copy(update={"engine_replica": index, "engine_slot": "a"})
        write_request(replica.engine_request_file, request or EngineRequest())
    env = supervisor_env(settings)
    since = log_position(settings.vllm_log_file)  # only this launch's phase counts (not the last run's)
    prepared = subprocess.run([sys.executable, "-m", "engine.launcher", "--prepare-only"], env=env, cwd=PROJECT_ROOT)
    if prepared.returncode != 0:
        return 2
    if engine_build(settings) == "gpu":  # the GPU preflight (make doctor's engine checks) before anything starts
        doctor = [sys.executable, "-m", "engine.doctor", "--in-container"]
        checked = subprocess.run(doctor, env=env, cwd=PROJECT_ROOT, check=False)
        if checked.returncode != 0:
            return failed(2, "The GPU preflight failed (lines above); fix them and run `make up` again.")
    conf = write_conf(settings, CONF)  # CONF itself, or with the replicas and the router (engine.local_replicas)
    subprocess.run(
        [sys.executable, "-m", "supervisor.supervisord", "-c", str(conf)], env=env, cwd=PROJECT_ROOT, check=True
    )
    code = await_start(settings, since or LogPosition(dev=0, ino=0, offset=0))
    if code != 0:
        return code
    print(
        f"[INFO] Stack ready: vLLM {settings.vllm_url} | UI http://{settings.ui_host}:{settings.ui_port} | "
        f"Locust http://{settings.locust_web_host}:{settings.locust_web_port} | sidecar {settings.sidecar_url}"
    )
    return 0


def await_start(settings: Settings, since: LogPosition) -> int:
    """Wait for a fresh start's services; 0 when all answer. A failed start, or Ctrl-C (130), stops what started."""
    try:
        ok, why = wait_ready(settings, since)
    except KeyboardInterrupt:
        print("\n[INFO] Interrupted (Ctrl-C) while the stack started: stopping what started.", file=sys.stderr)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the stop short (≤ 60 s)
        down(settings)
        return 130
    if not ok:
        failed(1, why, "Stopping the stack; fix the cause and run `make up` again.")
        down(settings)
        return 1
    return 0


def resume(settings: Settings, states: dict[str, dict[str, Any]]) -> int:
    """`make up` on a running supervisord: restart services that died, say so when MODEL differs from what runs."""
    engine = read_engine_state(settings.engine_state_file)
    request = read_request(settings.engine_request_file)
    running = request.model or (engine.requested if engine else None)
    if running and running != settings.requested_model:
        print(
            f"[WARN] The stack already serves {running}; MODEL={settings.requested_model} takes effect after "
            "`make down && make up` (or `./start_vllm.sh` to switch only vLLM).",
            file=sys.stderr,
        )
    if request.profiler:
        print("[INFO] vLLM runs with its profiler (an interrupted PROFILE=1 run); switching back.", flush=True)
        try:
            LocalEngine(settings).restart(request.model_copy(update={"profiler": False}))
        except EngineError as exc:
            print(f"[WARN] {exc}", file=sys.stderr)
        states = states_now(settings)
    dead = [s.name for s in programs(settings) if states.get(s.name, {}).get("statename") != "RUNNING"]
    if not dead:
        print("[INFO] The stack is already running (supervisord answers); `make status` shows it.")
        return status(settings)
    print(
        f"[INFO] The stack is running but {', '.join(dead)} stopped; restarting {'it' if len(dead) == 1 else 'them'}."
    )
    since = log_position(settings.vllm_log_file) if own_program(settings) in dead else None
    if ROUTER_PROGRAM in states and ROUTER_PROGRAM not in dead and any(n in dead for n in program_names(settings)):
        rpc(settings).supervisor.stopProcess(ROUTER_PROGRAM)  # restarted after the replicas (local_replicas.main)
        dead.append(ROUTER_PROGRAM)
    for name in dead:
        try:
            rpc(settings).supervisor.startProcess(name, False)
        except xmlrpc.client.Fault as exc:
            print(f"[WARN] could not start {name}: {exc.faultString}", file=sys.stderr)
    ok, why = wait_ready(settings, since)
    if not ok:
        return failed(1, why, "Run `make down && make up` to start afresh.")
    return status(settings)


def end_leftovers(settings: Settings) -> int:
    """End what a crashed vLLM left of this stack's engine; 0 when nothing is left."""
    state = read_engine_state(settings.engine_state_file)
    same_host = state is not None and state.pid_namespace == pid_namespace()
    ended = end_engine_processes(settings.run_dir, pgid=state.pgid if state and same_host else None)
    if ended.found:
        killed = f"; {len(ended.killed)} needed SIGKILL" if ended.killed else ""
        print(f"[INFO] Ended {len(ended.found)} leftover engine processes ({' '.join(map(str, ended.found))}){killed}.")
    return failed(1, f"engine processes still running: {' '.join(map(str, ended.left))}") if ended.left else 0


def down(settings: Settings) -> int:
    """Stop supervisord and its services, then what is left of this stack's engine; 0 when nothing is left."""
    supervisor = Supervisor(settings.run_dir)
    try:
        running = process_states(settings) is not None
    except SupervisorNotAnswering:
        running = True  # busy: the shutdown request below waits for it (or says why it failed)
    stopping = running or supervisor.alive()  # alive: an earlier `make down` (or an interrupted `make up`'s)
    if running:
        try:
            rpc(settings).supervisor.shutdown()
        except (OSError, xmlrpc.client.Error) as exc:
            print(f"[WARN] shutdown request failed: {exc}", file=sys.stderr)
    else:
        print(f"[INFO] The stack is {'stopping already; waiting for it' if stopping else 'not running'}.")
    deadline = time.monotonic() + 60
    while stopping and supervisor.alive() and time.monotonic() < deadline:
        time.sleep(0.5)
    if stopping and supervisor.alive():
        return failed(1, f"supervisord did not stop within 60 s (pid file {supervisor.pid_file})")
    left = end_leftovers(settings)
    cluster_record(settings).unlink(missing_ok=True)
    clear_slots(settings.run_dir)
    if stopping:
        print("[INFO] Stack stopped.")
    return left


def status(settings: Settings) -> int:
    """Print each service's state and whether it answers; 0 when all run and answer, 1 when one does not, 3
    when the stack is not running, 4 when supervisord did not answer in time."""
    try:
        states = process_states(settings)
    except SupervisorNotAnswering as exc:
        print(f"The stack's {exc}.")
        return EXIT_NOT_ANSWERING
    if states is None:
        print("The stack is not running (`make up` starts it).")
        return EXIT_NOT_RUNNING
    healthy = True
    engines = set(program_names(settings))
    silent_engines = []
    for svc in programs(settings):
        info = states.get(svc.name, {})
        state = info.get("statename", "UNKNOWN")
        answering = answers(svc.url, svc.headers)
        healthy &= state == "RUNNING" and answering
        if svc.name in engines and state == "RUNNING" and not answering:
            silent_engines.append(svc.name)
        print(f"{svc.name:8s} {state:9s} {'answers' if answering else 'no answer':10s} {svc.url}  log: {svc.log}")
    for name in starting_beside(settings, states):  # a switch in progress: not serving yet, not judged
        state = states[name].get("statename", "UNKNOWN")
        print(f"{name:8s} {state:9s} {'':10s} the next engine of ./start_vllm.sh, starting beside the serving one")
    for engine in (r for r in replicas(settings) if not r.local):  # ENGINE_URLS: behind this host's router
        answering = answers(f"{engine.url}/v1/models", tuple(settings.vllm_headers.items()))
        healthy &= answering
        print(f"{engine.name:8s} {'remote':9s} {'answers' if answering else 'no answer':10s} {engine.url}/v1/models")
    phase = engine_phase(settings)
    state = read_engine_state(settings.engine_state_file)
    lines = [
        serving_line(state, phase),
        f"vLLM startup: {phase.phase} — {phase.detail}",
        f"  error: {phase.error_line}" if phase.error_line else None,
        startup_times_line(startup_facts(phase)),
        phases_line(latest_start(settings.vllm_log_file, state)),
    ]
    if silent_engines and phase.phase == "ready":  # it came up, then stopped answering (SIGTERM, a hung engine core)
        lines.append(f"[HINT] {', '.join(silent_engines)} runs but no longer answers: `./start_vllm.sh` starts a fresh "
                     "engine and swaps it in; `make down && make up` restarts the whole stack.")
    redact = Redactor(secret_values(settings))
    print("\n".join(redact(line) for line in lines if line))
    return 0 if healthy else 1


def token(settings: Settings) -> int:
    """Make the sidecar token file when missing and print its path, never the token (for compose's secret)."""
    try:
        ensure_sidecar_token(settings)
    except OSError as exc:
        return failed(2, f"cannot make the sidecar token {settings.sidecar_token_path}: {exc}")
    print(settings.sidecar_token_path if not settings.sidecar_token else "SIDECAR_TOKEN is set (no file used)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """CLI entry."""
    guard_stdout()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=["up", "down", "status", "token"])
    args = parser.parse_args(argv)
    typos = env_typos() if args.command == "up" else []
    if typos:
        return failed(2, *typos)
    settings = get_settings()
    return {"up": up, "down": down, "status": status, "token": token}[args.command](settings)


if __name__ == "__main__":
    raise SystemExit(main())
