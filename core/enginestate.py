"""The engine's state file (``logs/engine_state.json``, written by :mod:`engine.launcher`; one reader,
:func:`read_engine_state`), :class:`EngineControl`, how the layers above start, stop or restart the engine, and
whether it is idle before a run: vLLM's ``vllm:num_requests_running`` + ``waiting`` gauges summed over its engines,
and whether a run goes, waits or is refused (:class:`EngineLoad`, pure).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import psutil
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.atomicfile import atomic_write
from core.redact import split_secret_flags
from core.serverview_samples import Samples


class LogPosition(BaseModel):
    """Where a launch began in vLLM's log: the file's device and inode, and the byte offset."""

    dev: int
    ino: int
    offset: int = Field(ge=0, description="Size of the file when the launch began, bytes.")


def log_position(path: Path) -> LogPosition | None:
    """The end of ``path`` now (where the next line will start); None when it does not exist."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return LogPosition(dev=st.st_dev, ino=st.st_ino, offset=st.st_size)


def pid_namespace() -> str | None:
    """This process's pid namespace (``pid:[4026531836]``); None where ``/proc`` does not say."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


class EngineState(BaseModel):
    """What the launcher started (no secrets: secret-looking argument values are redacted before writing)."""

    model_config = ConfigDict(extra="ignore")

    requested: str = Field(description="MODEL as asked for (or the default HF id).")
    source: str = Field(description="Where the model came from: hf_cache, hub, local_dir, synthetic, ...")
    model_arg: str = Field(description="What vLLM's --model received (an HF id or a folder).")
    served_name: str = Field(description="The name clients use (--served-model-name).")
    synthetic: bool = False
    synthetic_variant: str | None = None
    fallback_reason: str | None = Field(default=None, description="Why the synthetic stand-in is served, if it is.")
    pid: int | None = Field(default=None, description="vLLM's pid (the launcher's child).")
    pid_namespace: str | None = Field(
        default=None,
        description="The pid namespace of ``pid`` (:func:`pid_namespace`): a reader in another one (another "
        "container) must not look that pid up.",
    )
    pgid: int | None = Field(
        default=None,
        description="vLLM's process group (the launcher's): every process vLLM starts keeps it, also after a crash "
        "re-parents it to PID 1 and renames it (setproctitle), so `make down` finds them by it.",
    )
    hostname: str | None = Field(default=None, description="Host (container) the engine runs on.")
    started_at: float | None = Field(default=None, description="Unix time of the launch, s.")
    argv: list[str] = Field(default_factory=list, description="vLLM's command line (secret values redacted).")
    vllm_url: str | None = None
    profiler: bool = Field(default=False, description="Started with --profiler-config (profiling endpoints on).")
    log_start: LogPosition | None = Field(
        default=None, description="Where this launch's lines begin in vllm.log (read by the start-up phase reader)."
    )
    exit_code: int | None = Field(
        default=None, description="vLLM's exit status as a shell shows it (128 + N: killed by signal N), written "
        "by the launcher once vLLM exited; None while it runs or when the launcher itself was killed.",
    )
    exited_at: float | None = Field(default=None, description="Unix time vLLM exited, s (with ``exit_code``).")
    engine_python_version: str | None = Field(default=None, description="Python of the interpreter running vLLM.")
    engine_torch_version: str | None = Field(default=None, description="torch of the engine (e.g. 2.9.0+cu129).")
    engine_cuda_runtime: str | None = Field(
        default=None, description="CUDA runtime the engine's torch was built with (None: a CPU build)."
    )
    gpu_devices: list[int] | None = Field(
        default=None, description="NVML indices (PCI order) of the GPUs the engine uses; None: unknown or no GPU."
    )

    @property
    def engine_python(self) -> str | None:
        """The interpreter running vLLM (``argv[0]``), or None."""
        return self.argv[0] if self.argv else None


def pid_running(state: EngineState, started_slack_s: float = 5.0) -> bool | None:
    """Whether ``state.pid`` still runs: None when unknowable here (no pid, other namespace or host); False when gone, a
    zombie, or reused (started over ``started_slack_s`` after ``state.started_at``)."""
    if state.pid is None or state.pid_namespace is None or state.pid_namespace != pid_namespace():
        return None
    if state.hostname is not None and state.hostname != socket.gethostname():
        return None  # the host's own pid namespace has the same name on every host
    try:
        process = psutil.Process(state.pid)
        if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return False
        proc_started_s = process.create_time()
    except psutil.NoSuchProcess:  # a zombie too
        return False
    except psutil.Error:  # not ours to read
        return None
    return not (state.started_at is not None and proc_started_s > state.started_at + started_slack_s)


def read_engine_state(path: Path) -> EngineState | None:
    """The state file as :class:`EngineState`; None when missing, unreadable or not a state."""
    try:
        return EngineState.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError):
        return None


def write_engine_state(path: Path, state: EngineState) -> None:
    """Replace the state file atomically (a reader never sees half a file)."""
    atomic_write(path, json.dumps(state.model_dump(), indent=2))


def record_exit(path: Path, pid: int | None, code: int) -> None:
    """Add vLLM's exit status and time to the state file at ``path``, if it is still ``pid``'s launch."""
    state = read_engine_state(path)
    if state is not None and pid is not None and state.pid == pid:
        write_engine_state(path, state.model_copy(update={"exit_code": code, "exited_at": time.time()}))


class EngineRequest(BaseModel):
    """What the next launch of the engine should change relative to the settings (``run/engine_request.json``)."""

    model: str | None = Field(default=None, description="Serve this model instead of MODEL (a model switch).")
    profiler: bool = Field(default=False, description="Start with vLLM's torch profiler endpoints.")
    vllm_extra_args: str | None = Field(
        default=None, description="Replace VLLM_EXTRA_ARGS (e.g. '--max-num-seqs 4' for an A/B of one vLLM flag)."
    )
    knobs: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Engine settings of this launch by field name (KV_CACHE_GB, VLLM_MAX_MODEL_LEN, VLLM_DTYPE ... as "
        "``./start_vllm.sh --kv-cache-gb 4`` gave them; the fields of :data:`ENGINE_KNOBS`), replacing the stack's.",
    )


ENGINE_KNOBS = (
    "served_model_name",
    "hf_hub_offline",
    "hub_probe_timeout_s",
    "kv_cache_gb",
    "vllm_max_model_len",
    "vllm_dtype",
    "vllm_cpu_num_of_reserved_cpu",
    "vllm_cpu_omp_threads_bind",
    "engine_python",
)
"""The settings a switch carries to the launcher in :attr:`EngineRequest.knobs` (MODEL and VLLM_EXTRA_ARGS have
their own fields); every one changes vLLM's command line, its environment or the model it resolves."""


def read_request(path: Path) -> EngineRequest:
    """The pending request for the launcher (an empty request when there is none or it is unreadable)."""
    try:
        return EngineRequest.model_validate_json(path.read_bytes())
    except (OSError, ValueError):
        return EngineRequest()


def write_request(path: Path, request: EngineRequest) -> None:
    """Store ``request`` for the next launch (empty: remove the file), secret flags left out.

    Raises:
        ValueError: ``vllm_extra_args`` does not parse.
    """
    if request.vllm_extra_args:
        kept, secret = split_secret_flags(shlex.split(request.vllm_extra_args))
        if secret:
            request = request.model_copy(update={"vllm_extra_args": shlex.join(kept)})
    if request == EngineRequest():
        path.unlink(missing_ok=True)
        return
    atomic_write(path, json.dumps(request.model_dump()))


class EngineStatus(BaseModel):
    """The engine's process as its controller sees it."""

    running: bool
    state: str = Field(description="The controller's word for it: RUNNING, STARTING, STOPPED, FATAL, ...")
    request: EngineRequest = Field(default_factory=EngineRequest)


class EngineError(RuntimeError):
    """The engine could not be controlled (not running under this controller, or it did not come up)."""


class EngineControl(Protocol):
    """Start, stop and restart the engine, and say how it runs. Implementations: :mod:`engine.local_control`."""

    def status(self) -> EngineStatus | None:
        """The engine's process state; None when this controller does not run the stack."""

    def start(self) -> None:
        """Start the engine (no-op when it runs) and wait until it answers. Raises EngineError."""

    def stop(self) -> None:
        """Stop the engine. Raises EngineError."""

    def restart(self, request: EngineRequest) -> None:
        """Restart with ``request`` and wait until it answers.

        Raises:
            EngineError: not running under this controller, or the engine did not come up.
        """


RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
Decision = Literal["go", "wait", "refuse"]


@dataclass(frozen=True)
class EngineLoad:
    """Requests the engines hold now, summed over the ``engines`` scraped that expose the gauges."""

    running: int
    waiting: int
    engines: int = 1

    @property
    def busy(self) -> bool:
        """Any request running or waiting."""
        return self.running + self.waiting > 0

    def text(self) -> str:
        """``13 running + 2 waiting requests`` (``… over 2 engines`` for several)."""
        over = f" over {self.engines} engines" if self.engines > 1 else ""
        return f"{self.running} running + {self.waiting} waiting requests{over}"


def engine_load(scrapes: Sequence[Samples]) -> EngineLoad | None:
    """Requests running and waiting summed over every engine of ``scrapes``; None without the gauges."""
    exposed = [samples for samples in scrapes if RUNNING in samples or WAITING in samples]
    if not exposed:
        return None
    total = {gauge: sum(sum(samples.get(gauge, {}).values()) for samples in exposed) for gauge in (RUNNING, WAITING)}
    return EngineLoad(round(total[RUNNING]), round(total[WAITING]), len(exposed))


def idle_decision(load: EngineLoad | None, waited_s: float, limit_s: float) -> Decision:
    """``go`` (engine idle, load unknown, or ``limit_s`` 0), ``wait`` while busy under ``limit_s``, ``refuse`` after."""
    if limit_s <= 0 or load is None or not load.busy:
        return "go"
    return "wait" if waited_s < limit_s else "refuse"


def busy_refusal(load: EngineLoad, waited_s: float) -> str:
    """Why a run is refused, with the figure and what to do."""
    return (
        f"vLLM is still busy after {waited_s:.0f} s: {load.text()}, none of them this run's (another client's, "
        "or a stopped run's that vLLM has not aborted yet). Measured now, their load would count in this run's "
        "figures. Wait for them to end, stop that client, raise IDLE_WAIT_S, or set IDLE_WAIT_S=0 to measure "
        "alongside them. Nothing was sent."
    )
