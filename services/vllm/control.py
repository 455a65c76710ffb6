"""Engine control in local mode: the :class:`core.engine.EngineControl` of a vLLM run by the project's supervisord.

A restart with other arguments (another model, the profiler on or off) writes ``run/engine_request.json``, which
the launcher reads on its next start, then restarts ``program:vllm`` and waits until vLLM answers. A vLLM that
supervisord restarts later keeps the request; ``make up`` on a stopped stack starts afresh from the settings.
"""

from __future__ import annotations

import os
import subprocess
import xmlrpc.client
from pathlib import Path
from typing import Any

from supervisor.xmlrpc import SupervisorTransport

from core.engine import EngineError, EngineRequest, EngineStatus, read_request, write_request
from core.net import wait_for_http
from core.settings import PROJECT_ROOT, Settings

PROGRAM = "vllm"
FAILED_STATES = frozenset({"FATAL", "EXITED", "BACKOFF", "STOPPED", "UNKNOWN"})


class Supervisor:
    """XML-RPC client of the stack's supervisord (its unix socket in RUN_DIR)."""

    def __init__(self, run_dir: Path) -> None:
        self.socket = run_dir.resolve() / "supervisor.sock"

    def proxy(self) -> Any:
        """An ``xmlrpc.client.ServerProxy`` over the unix socket (one per call: proxies are not thread-safe)."""
        transport = SupervisorTransport(None, None, f"unix://{self.socket}")
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)

    def states(self) -> dict[str, dict[str, Any]] | None:
        """``{program: info}`` from supervisord, or None when it is not running."""
        try:
            return {p["name"]: p for p in self.proxy().supervisor.getAllProcessInfo()}
        except (OSError, xmlrpc.client.Error):
            return None


class LocalEngine:
    """:class:`core.engine.EngineControl` for ``program:vllm`` under the stack's supervisord."""

    def __init__(self, settings: Settings, supervisor: Supervisor | None = None) -> None:
        self.settings = settings
        self.supervisor = supervisor or Supervisor(settings.run_dir)

    def status(self) -> EngineStatus | None:
        """vLLM's supervisor state and the request it was started with; None when supervisord is not running."""
        states = self.supervisor.states()
        if states is None:
            return None
        state = states.get(PROGRAM, {}).get("statename", "UNKNOWN")
        request = read_request(self.settings.engine_request_file)
        return EngineStatus(running=state in ("RUNNING", "STARTING"), state=state, request=request)

    def _require(self) -> EngineStatus:
        status = self.status()
        if status is None:
            raise EngineError("the local stack is not running (supervisord does not answer); `make up` first")
        return status

    def _wait(self) -> None:
        url = f"{self.settings.vllm_url}/v1/models"

        def dead() -> str | None:
            state = (self.supervisor.states() or {}).get(PROGRAM, {}).get("statename", "UNKNOWN")
            return f"vLLM is {state}; see {self.settings.vllm_log_file}" if state in FAILED_STATES else None

        ok, why = wait_for_http(url, self.settings.startup_timeout_s, abort=dead)
        if not ok:
            raise EngineError(why)

    def start(self) -> None:
        """Start vLLM when it is not running and wait until it answers."""
        if not self._require().running:
            self.supervisor.proxy().supervisor.startProcess(PROGRAM, False)
        self._wait()

    def stop(self) -> None:
        """Stop vLLM (its process group)."""
        if self._require().running:
            self.supervisor.proxy().supervisor.stopProcess(PROGRAM)

    def restart(self, request: EngineRequest) -> None:
        """Restart vLLM with ``request`` and wait until it answers (see :class:`core.engine.EngineControl`)."""
        self._require()
        write_request(self.settings.engine_request_file, request)
        self.stop()
        self.start()


class ComposeEngine:
    """:class:`core.engine.EngineControl` for the ``vllm`` service of the compose stack (``docker compose``).

    A restart recreates only that service with the request's model (``MODEL``); the other containers keep running.
    """

    def __init__(self, settings: Settings, compose: tuple[str, ...] = ("docker", "compose")) -> None:
        self.settings = settings
        self.compose = compose

    def _run(self, *args: str, env: dict[str, str] | None = None, timeout_s: float = 60) -> str | None:
        """``docker compose ARGS`` in the project; its stdout, or None when compose or its engine is not there."""
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
        """Recreate only ``vllm`` with the request's model and wait until it answers (the profiler is configured
        in compose through VLLM_EXTRA_ARGS, not by a restart)."""
        env = {"MODEL": request.model} if request.model else {}
        if request.vllm_extra_args is not None:
            env["VLLM_EXTRA_ARGS"] = request.vllm_extra_args
        if self._run("up", "-d", "--no-deps", "--force-recreate", PROGRAM, env=env, timeout_s=600) is None:
            raise EngineError("docker compose up --force-recreate vllm failed; see `docker compose logs vllm`")
        self._wait()

    def _wait(self) -> None:
        ok, why = wait_for_http(f"{self.settings.vllm_url}/v1/models", self.settings.startup_timeout_s)
        if not ok:
            raise EngineError(why)
