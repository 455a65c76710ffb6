"""Backend status for the UI header: probes vLLM's /health, /v1/models and /version, classifies Ready/Loading/Down."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx

from core.enginestate import EngineState, pid_namespace, read_engine_state
from core.shapes import JSON_OBJECT, MODEL_LIST, MODEL_LIST_SHAPE, ShapeError, answer_as
from ui.chat import escape_directives

State = Literal["Ready", "Loading", "Down"]
PROBE_TIMEOUT_S = 3.0
DEFAULT_STARTUP_WINDOW_S = 900.0


@dataclass(frozen=True)
class Probe:
    """Raw answers of vLLM's endpoints; ``None`` where there was no usable answer."""

    health_code: int | None  # HTTP status of /health; None when not reachable
    connect_error: str | None  # why /health was not reachable
    models: Mapping[str, Any] | None  # JSON of /v1/models
    version: str | None  # from /version
    models_code: int | None = None  # HTTP status of /v1/models (401/403: the API key is missing or wrong)
    models_problem: str | None = None  # /v1/models answered 200 with no model list (an HTML page, another shape)


@dataclass(frozen=True)
class BackendStatus:
    """What the header shows."""

    state: State
    url: str
    model: str | None = None
    max_model_len: int | None = None
    version: str | None = None
    synthetic: bool = False
    synthetic_reason: str | None = None
    detail: str = ""

    @property
    def ready(self) -> bool:
        """True when requests can be sent."""
        return self.state == "Ready"


def engine_process_alive(
    state: EngineState | None,
    proc_root: Path = Path("/proc"),
    *,
    hostname: str | None = None,
    now_s: float | None = None,
    startup_window_s: float = DEFAULT_STARTUP_WINDOW_S,
    own_pid_namespace: str | None = None,
) -> bool:
    """True when the vLLM process recorded in ``state`` (the launcher's engine_state.json) is presumably running.

    On this host: its pid runs and its command line mentions vLLM. On another host or in another pid namespace (a
    separate container, see ``state.hostname`` and ``state.pid_namespace``) the pid means another process or none, so
    a launch younger than ``startup_window_s`` counts instead.
    """
    if state is None:
        return False
    here = own_pid_namespace or pid_namespace()
    foreign_ns = state.pid_namespace is not None and state.pid_namespace != here
    if foreign_ns or (state.hostname is not None and state.hostname != (hostname or socket.gethostname())):
        now = time.time() if now_s is None else now_s
        return state.started_at is not None and 0 <= now - state.started_at <= startup_window_s
    pid = state.pid
    if pid is None or pid <= 0:
        return False
    try:
        cmdline = (proc_root / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False
    return b"vllm" in cmdline


def _first_model(models: Mapping[str, Any] | None) -> tuple[str | None, int | None]:
    data = models.get("data") if models else None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        return None, None
    model_id = data[0].get("id")
    max_len = data[0].get("max_model_len")
    return (model_id if isinstance(model_id, str) else None), (max_len if isinstance(max_len, int) else None)


def _synthetic(model: str | None, engine_state: EngineState | None) -> tuple[bool, str | None]:
    if engine_state and engine_state.synthetic and engine_state.served_name == model:
        return True, engine_state.fallback_reason or f"MODEL={engine_state.requested} was requested"
    if model and "synthetic" in model.lower():
        return True, None
    return False, None


def classify(probe: Probe, url: str, engine_state: EngineState | None, engine_alive: bool) -> BackendStatus:
    """Ready (health OK and a model listed), Loading (starting up) or Down, with what to do in ``detail``."""
    model, max_len = _first_model(probe.models)
    synthetic, reason = _synthetic(model, engine_state)

    def status(state: State, detail: str = "") -> BackendStatus:
        ready = state == "Ready"
        return BackendStatus(state=state, url=url, model=model if ready else None,
                             max_model_len=max_len if ready else None, version=probe.version, synthetic=synthetic,
                             synthetic_reason=reason, detail=detail)  # fmt: skip

    if probe.health_code is None:
        if engine_alive:
            return status("Loading", "vLLM is starting and loading the model (usually 1-3 minutes); this updates by "
                          "itself.")  # fmt: skip
        return status("Down", f"vLLM is not reachable at {url} ({probe.connect_error or 'no answer'}). Start it with "
                      "`make up`.")  # fmt: skip
    if probe.health_code != 200:
        return status("Down", f"vLLM answers /health with HTTP {probe.health_code}: the engine is not healthy; see "
                      "logs/vllm.log.")  # fmt: skip
    if probe.models_code in (401, 403):
        return status("Down", f"vLLM refuses the API key (HTTP {probe.models_code} on /v1/models): set VLLM_API_KEY "
                      "to the key vLLM was started with.")  # fmt: skip
    if probe.models_problem:
        return status("Down", f"{probe.models_problem}: is {url} an OpenAI-compatible server's root (VLLM_BASE_URL, "
                      "no /v1)?")  # fmt: skip
    if model is None:
        return status("Loading", "vLLM is up but lists no model yet; this status updates by itself.")
    return status("Ready")


async def probe_vllm(client: httpx.AsyncClient, url: str, timeout_s: float = PROBE_TIMEOUT_S) -> Probe:
    """Ask vLLM at ``url`` (no ``/v1``) for /health, /v1/models and /version; never raises on network errors or
    answers of another shape (``/v1/models`` that is no model list: ``models_problem`` says what came back).
    ``client`` carries VLLM_API_KEY in its headers (``/v1/models`` needs it when vLLM has a key)."""
    try:
        health = await client.get(f"{url}/health", timeout=timeout_s)
    except httpx.HTTPError as exc:
        return Probe(health_code=None, connect_error=_describe(exc), models=None, version=None)
    models: Mapping[str, Any] | None = None
    problem: str | None = None
    version: str | None = None
    models_code: int | None = None
    try:
        response = await client.get(f"{url}/v1/models", timeout=timeout_s)
        models_code = response.status_code
        if response.status_code == 200:
            answer_as(response, MODEL_LIST, MODEL_LIST_SHAPE)
            models = response.json()
    except httpx.HTTPError:
        pass
    except ShapeError as exc:
        problem = str(exc)
    try:
        response = await client.get(f"{url}/version", timeout=timeout_s)
        if response.status_code == 200:
            version = answer_as(response, JSON_OBJECT, "a JSON object").get("version") or None
    except (httpx.HTTPError, ShapeError):
        pass
    return Probe(
        health_code=health.status_code, connect_error=None, models=models, version=str(version) if version else None,
        models_code=models_code, models_problem=problem,
    )


def _describe(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.ConnectError):
        return "connection refused"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return type(exc).__name__


async def current_status(
    client: httpx.AsyncClient, url: str, engine_state_file: Path, startup_window_s: float = DEFAULT_STARTUP_WINDOW_S
) -> BackendStatus:
    """Probe vLLM and classify, using the launcher's state file for Loading vs Down and the synthetic flag."""
    probe = await probe_vllm(client, url)
    state = read_engine_state(engine_state_file)
    alive = probe.health_code is None and engine_process_alive(state, startup_window_s=startup_window_s)
    return classify(probe, url, state, engine_alive=alive)


def header_markdown(status: BackendStatus) -> str:
    """The header: ``Model: ...``, ``Backend: vLLM 0.32.0``, ``Status: Ready`` (+ context, notes), one per line."""
    backend = f"vLLM {escape_directives(status.version)}" if status.version else "vLLM (version unknown)"
    lines = [
        f"**Model:** {escape_directives(status.model or 'unknown')}",
        f"**Backend:** {backend}",
        f"**Status:** {status.state}",
    ]
    if status.max_model_len:
        lines.append(f"**Context:** {status.max_model_len} tokens")
    lines.append(f"**Endpoint:** {status.url}")
    if status.detail:
        lines.append(f"\n{escape_directives(status.detail)}")
    if status.synthetic:
        lines.append(
            "\n**Synthetic model:** random weights, so its answers are noise by design; "
            "use it to test the stack, not the text."
        )
        if status.synthetic_reason:
            why, cause = plain_reason(status.synthetic_reason)
            lines.append(f"It is served because {escape_directives(why)}.")
            if cause:
                lines.append(f"*Cause:* `{cause.replace('`', chr(39))}`")
    return "  \n".join(lines)


_DETAIL_RE = re.compile(r"\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)")


def plain_reason(reason: str) -> tuple[str, str | None]:
    """The launcher's fallback reason in plain words, and the technical cause apart (for a second line).

    The parenthesised details (an exception such as ``ConnectError: [Errno -2] Name or service not known``) are
    the cause; the plain words are the rest up to the first ``;``. ``("the hub is unreachable", None)`` for a
    reason without details.
    """
    details = [match.group(1).strip() for match in _DETAIL_RE.finditer(reason)]
    plain = _DETAIL_RE.sub("", reason).split(";", 1)[0].strip().rstrip(".")
    return plain or reason, "; ".join(d for d in details if d) or None
