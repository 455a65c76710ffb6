"""Failed and dead launches: the grammar's fatal start-up shapes, the phase judged with the engine's process, only
the launch being waited for, and the one failure report that ``make up`` and ``./start_vllm.sh`` print."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import pytest

from core.enginestate import (
    EngineError,
    EngineRequest,
    EngineState,
    LogPosition,
    log_position,
    pid_namespace,
    write_engine_state,
)
from core.settings import Settings
from engine import local_control as control
from engine.enginephase import EngineProcess, engine_process, failure_report, judge, launch_phase
from engine.local_control import LocalEngine
from engine.vllmlog.startup import startup_phase
from stack import control as stackctl

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "logs"
ARGPARSE = FIXTURES / "vllm_0.32_argparse_typo.log"
"""Recorded: ``python -m vllm.entrypoints.openai.api_server --max-num-seqz 4`` (vLLM 0.32 CPU), after the launcher's
line: warnings, argparse's ``usage:`` block (300 lines) and its ``error:`` line, exit status 2."""
RECORDED = FIXTURES / "vllm_0.32_cpu_recorded.log"
TYPO = "api_server.py: error: unrecognized arguments: --max-num-seqz"

LAUNCH = "[INFO] Starting vLLM: /venv/bin/python -m vllm.entrypoints.openai.api_server --port 8100"
ARGS = "(APIServer pid=1) INFO 11-29 21:55:01 [utils.py:253] non-default args: {'port': 8100}"
WARMUP = "(Worker pid=3) INFO 11-29 21:55:21 [cpu_model_runner.py:87] Warming up model for the compilation..."
READY = "(APIServer pid=1) INFO 11-29 21:56:01 [entry.py:140] Starting vLLM server on http://127.0.0.1:8100"


def settings(tmp_path: Path) -> Settings:
    return Settings(_env_file=None, run_dir=tmp_path / "run", logs_dir=tmp_path / "logs")  # type: ignore[call-arg]


def test_argparse_error_fails_the_start_with_its_line() -> None:
    """A typo in VLLM_EXTRA_ARGS: argparse's ``<prog>: error:`` line (no header) is the failed start's error line."""
    phase = startup_phase(ARGPARSE)
    assert (phase.phase, phase.error_line) == ("failed", TYPO)
    assert phase.detail == f"failed: {TYPO}"


@pytest.mark.parametrize(
    "fatal",
    [
        "vllm serve: error: argument --max-num-seqs: invalid int value: 'four'",
        "Fatal Python error: Segmentation fault",
        "ValueError: max_num_batched_tokens (16) is smaller than max_model_len (4096).",
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        "(APIServer pid=1) ERROR 11-29 21:55:30 [core.py:708] EngineCore failed to start.",
    ],
)
def test_fatal_start_up_shapes_fail_the_start(fatal: str) -> None:
    """vLLM's ways of dying before its engine runs (bare exception lines of a traceback without vLLM's header,
    argparse, a crashed interpreter, an ERROR record) each fail the start with that line."""
    lines = [LAUNCH, ARGS, "Traceback (most recent call last):", '  File "x.py", line 1, in <module>', fatal]
    phase = startup_phase([*lines[:-3], fatal] if fatal.startswith("(") else lines)
    assert phase.phase == "failed" and phase.error_line is not None
    assert phase.error_line in fatal


def test_start_whose_process_exited_is_failed_with_the_exit_code() -> None:
    """The log says compiling but the process is gone and logged no error: failed, ``exited with code N``."""
    phase = judge(startup_phase([LAUNCH, ARGS, WARMUP]), EngineProcess(False, 137))
    assert phase.phase == "failed" and "exited with code 137 before it was ready" in phase.detail
    assert phase.attempts[-1].outcome == "failed"


def test_running_or_unknown_process_leaves_the_phase_alone() -> None:
    """While the process runs (or nothing can tell) the log's phase stands."""
    compiling = startup_phase([LAUNCH, ARGS, WARMUP])
    assert judge(compiling, EngineProcess(True)) == compiling
    assert judge(compiling, EngineProcess(None)) == compiling


def test_ready_launch_whose_process_is_gone_died_after_being_ready() -> None:
    """A ready server killed since is ``stopped``: ``died after being ready`` with the exit, never ``ready``."""
    phase = judge(startup_phase([LAUNCH, ARGS, WARMUP, READY]), EngineProcess(False, 137))
    assert (phase.phase, phase.detail) == ("stopped", "died after being ready (exited with code 137)")
    assert phase.attempts[-1].outcome == "stopped"
    stopped = judge(startup_phase([LAUNCH, ARGS, READY]), EngineProcess(False, 0, stopped_on_purpose=True))
    assert stopped.detail == "stopped after being ready"
    unknown = judge(startup_phase([LAUNCH, ARGS, READY]), EngineProcess(False))
    assert unknown.detail == "died after being ready"


def test_process_from_state_file_then_supervisor_then_pid(tmp_path: Path) -> None:
    """The launcher's recorded exit wins; then supervisord's state; then whether the recorded pid runs."""
    base = EngineState(requested="m", source="synthetic", model_arg="m", served_name="m")
    exited = base.model_copy(update={"pid": 1, "exit_code": 2})
    assert engine_process(exited, {"statename": "RUNNING"}) == EngineProcess(False, 2)  # the launcher drains
    relaunched = {"statename": "STARTING", "start": 200}  # a new launcher that has not recorded its launch yet
    assert engine_process(exited.model_copy(update={"started_at": 100.0}), relaunched).running is True
    assert engine_process(None, {"statename": "FATAL", "exitstatus": 2}) == EngineProcess(False, 2)
    assert engine_process(None, {"statename": "RUNNING"}).running is True
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = time.time()
    child.wait()  # reaped: its pid is gone
    gone = base.model_copy(update={"pid": child.pid, "pid_namespace": pid_namespace(), "started_at": started})
    assert engine_process(gone).running is False
    me = base.model_copy(update={"pid": os.getpid(), "pid_namespace": pid_namespace(), "started_at": time.time()})
    assert engine_process(me).running is True
    assert engine_process(gone, {"statename": "RUNNING", "start": 0}).running is False  # the launcher still drains
    elsewhere = me.model_copy(update={"pid_namespace": "pid:[1]"})
    assert engine_process(elsewhere).running is None


def test_launch_phase_reads_only_the_launch_after_its_position(tmp_path: Path) -> None:
    """Waiting for a new launch never shows the previous run's phase: before its first line it is not started."""
    log = tmp_path / "vllm.log"
    log.write_text("\n".join([LAUNCH, ARGS, READY]) + "\n")
    since = log_position(log)
    assert launch_phase(log, None, since).phase == "not_started"
    assert launch_phase(log, None).phase == "ready"
    with log.open("a") as fh:
        fh.write(LAUNCH + "\n" + ARGS + "\n")
    phase = launch_phase(log, None, since, EngineProcess(True))
    assert phase.phase == "starting" and len(phase.attempts) == 1


def test_failure_report_names_the_error_line_and_the_launch_tail(tmp_path: Path) -> None:
    """The report gives the failed phase's error line and the launch's last lines, not the previous run's."""
    log = tmp_path / "vllm.log"
    log.write_bytes(RECORDED.read_bytes())
    since = log_position(log)
    log.write_bytes(log.read_bytes() + ARGPARSE.read_bytes())
    phase = launch_phase(log, None, since, EngineProcess(False, 2))
    report = failure_report(log, phase, since, tail_lines=5)
    assert report.startswith(f"vLLM failed: {TYPO}")
    assert report.splitlines()[-1] == f"  | {TYPO}" and len(report.splitlines()) == 2 + 5


class DyingSupervisor:
    """supervisord whose ``program:vllm`` writes ``log_bytes`` to the log and exits with status 2 when started."""

    def __init__(self, log: Path, log_bytes: bytes) -> None:
        self.log, self.log_bytes, self.state = log, log_bytes, "STOPPED"

    def states(self) -> dict[str, dict[str, Any]]:
        return {"vllm": {"statename": self.state, "exitstatus": 2 if self.state == "FATAL" else 0}}

    def proxy(self) -> Any:
        fake = self

        class _Rpc:
            def stopProcess(self, name: str) -> None:
                fake.state = "STOPPED"

            def startProcess(self, name: str, wait: bool = True) -> None:
                with fake.log.open("ab") as fh:
                    fh.write(fake.log_bytes)
                fake.state = "FATAL"

        class _Proxy:
            supervisor = _Rpc()

        return _Proxy()


def test_restart_with_a_typo_raises_with_argparse_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``./start_vllm.sh`` (LocalEngine.restart) with a bad flag names argparse's error line, with the log's tail."""
    s = settings(tmp_path)
    s.logs_dir.mkdir()
    s.vllm_log_file.write_bytes(RECORDED.read_bytes())  # a previous run that was ready
    monkeypatch.setattr(control, "wait_for_http", lambda url, timeout_s, abort, headers: (False, abort()))
    supervisor = DyingSupervisor(s.vllm_log_file, ARGPARSE.read_bytes())
    with pytest.raises(EngineError) as caught:
        LocalEngine(s, supervisor).restart(EngineRequest(vllm_extra_args="--max-num-seqz 4"))  # type: ignore[arg-type]
    assert f"vLLM failed: {TYPO}" in str(caught.value) and str(caught.value).endswith(TYPO)


def test_make_up_reports_the_same_cause_and_judges_only_its_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``make up``'s wait uses the same report; with a dead process the previous ready run is not shown as ready."""
    s = settings(tmp_path)
    s.logs_dir.mkdir()
    s.vllm_log_file.write_bytes(RECORDED.read_bytes())
    since = log_position(s.vllm_log_file)
    with s.vllm_log_file.open("ab") as fh:
        fh.write(ARGPARSE.read_bytes())
    supervisor = DyingSupervisor(s.vllm_log_file, b"")
    supervisor.state = "FATAL"
    monkeypatch.setattr(control, "Supervisor", lambda run_dir: supervisor)
    monkeypatch.setattr(stackctl, "process_states", lambda settings: supervisor.states())
    ok, why = stackctl.wait_ready(s, since)
    assert not ok and why.startswith(f"vllm is FATAL: vLLM failed: {TYPO}")
    write_engine_state(s.engine_state_file, EngineState(requested="m", source="x", model_arg="m", served_name="m"))
    assert stackctl.engine_phase(s).phase == "failed"  # the latest start in the log, judged with supervisord's FATAL


@pytest.mark.parametrize(("waited", "code", "said"), [
    ("interrupt", 130, "[INFO] Interrupted (Ctrl-C) while the stack started: stopping what started."),
    ((False, "vllm is FATAL"), 1, "[ERROR] Stopping the stack; fix the cause and run `make up` again."),
    ((True, ""), 0, None),
])  # fmt: skip
def test_make_up_interrupted_or_failed_while_waiting_stops_what_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    waited: Any, code: int, said: str | None,
) -> None:  # fmt: skip
    """Ctrl-C during ``make up``'s wait (once it left a half-started stack holding both cores) and a failed start
    both stop the stack (``make down``), with 130 and 1; a ready stack is left alone."""
    stopped: list[Settings] = []

    def wait(settings: Settings, since: Any) -> tuple[bool, str]:
        if waited == "interrupt":
            raise KeyboardInterrupt
        return cast("tuple[bool, str]", waited)

    monkeypatch.setattr(stackctl, "wait_ready", wait)
    def down(settings: Settings) -> int:
        stopped.append(settings)
        return 0

    monkeypatch.setattr(stackctl, "wait_ready", wait)
    monkeypatch.setattr(stackctl, "down", down)
    s = settings(tmp_path)
    assert stackctl.await_start(s, LogPosition(dev=0, ino=0, offset=0)) == code
    assert stopped == ([] if said is None else [s])
    assert said is None or said in capsys.readouterr().err


def test_launcher_records_the_exit_of_its_own_launch_only(tmp_path: Path) -> None:
    """The exit status goes into the state file of the launch that ended, never over a newer launch's state."""
    from core.enginestate import read_engine_state, record_exit

    path = tmp_path / "engine_state.json"
    write_engine_state(path, EngineState(requested="m", source="x", model_arg="m", served_name="m", pid=41))
    record_exit(path, 40, 1)  # an older launch: its state was replaced
    assert (state := read_engine_state(path)) is not None and state.exit_code is None
    record_exit(path, 41, 137)
    assert (state := read_engine_state(path)) is not None and (state.exit_code, state.pid) == (137, 41)
    assert engine_process(state) == EngineProcess(False, 137)
