"""The supervised services of local mode, how to ask whether they answer, and `make status`'s engine lines.

Without the router in front: ``vllm`` on VLLM_PORT, then the sidecar, the UI and Locust. With it (the default):
every local engine that serves now (its active slot, on REPLICA_PORT_BASE+K) and ``router`` on VLLM_PORT; engines on
other hosts are :func:`remote_engines`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx

from core.enginestate import EngineState
from core.replicas import Replica, as_started, front_in_use, replicas, router_metrics_port
from core.report_schema import StartupFacts
from core.settings import Settings
from core.slots import active_slot
from engine.local_replicas import ROUTER_PROGRAM, program_name
from engine.vllmlog.tracker import StartupPhase


@dataclass(frozen=True)
class Service:
    """A supervised service: its program name, readiness URL (and the headers it needs), port variable and log."""

    name: str
    url: str
    host: str
    port: int
    port_var: str
    log: Path
    headers: tuple[tuple[str, str], ...] = ()


def engine_services(settings: Settings) -> list[Service]:
    """The local engines: ``vllm`` on VLLM_PORT, or with the router each replica and then the router itself."""
    logs = settings.logs_dir
    headers = tuple(settings.vllm_headers.items())  # /v1/models needs the API key when vLLM has one
    if not front_in_use(settings):
        return [Service("vllm", f"{settings.vllm_url}/v1/models", settings.vllm_host, settings.vllm_port,
                        "VLLM_PORT", logs / "vllm.log", headers)]  # fmt: skip
    started = as_started(settings)
    out = []
    for r in replicas(settings):
        if r.index is None:
            continue
        slot = active_slot(settings.run_dir, r.index)
        name = program_name(r.index, slot)
        offset = r.index + (0 if slot == "a" else started.replicas + 1)
        out.append(Service(name, f"{r.url}/v1/models", settings.vllm_host, int(r.url.rsplit(":", 1)[1]),
                           f"REPLICA_PORT_BASE+{offset}", logs / f"{name}.log", headers))  # fmt: skip
    metrics_port = router_metrics_port(settings)
    out.append(Service(ROUTER_PROGRAM, f"{settings.vllm_url}/v1/models", settings.vllm_host, settings.vllm_port,
                       "VLLM_PORT", logs / "router.log", headers))  # fmt: skip
    out.append(Service("router-metrics", f"http://127.0.0.1:{metrics_port}/metrics", "127.0.0.1", metrics_port,
                       f"REPLICA_PORT_BASE+{settings.replicas} (router metrics)", logs / "router.log"))  # fmt: skip
    return out


def services(settings: Settings) -> list[Service]:
    """Every service of local mode, the engines first (``router-metrics`` is a port of ``router``, no program)."""
    logs = settings.logs_dir
    return [
        *engine_services(settings),
        Service("sidecar", f"{settings.sidecar_url}/health", settings.sidecar_host, settings.sidecar_port,
                "SIDECAR_PORT", logs / "sidecar.log"),
        Service("ui", f"http://127.0.0.1:{settings.ui_port}/", settings.ui_host, settings.ui_port, "UI_PORT",
                logs / "ui.log"),
        Service("locust", f"http://127.0.0.1:{settings.locust_web_port}/", settings.locust_web_host,
                settings.locust_web_port, "LOCUST_WEB_PORT", logs / "locust.log"),
    ]  # fmt: skip


def programs(settings: Settings) -> list[Service]:
    """The services that are supervisord programs (every one but the router's metrics port)."""
    return [s for s in services(settings) if s.name != "router-metrics"]


def remote_engines(settings: Settings) -> list[Replica]:
    """The engines of ENGINE_URLS (run on other hosts; ``make status`` asks whether they answer)."""
    return [r for r in replicas(settings) if not r.local]


def tail(path: Path, lines: int = 25) -> str:
    """Last ``lines`` lines of a log (empty when missing)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def answers(url: str, headers: tuple[tuple[str, str], ...] = ()) -> bool:
    """True when ``url`` answers HTTP 200 (after redirects: Locust's web UI sends a login to ``/login``)."""
    try:
        return httpx.get(url, timeout=5, headers=dict(headers), follow_redirects=True).status_code == 200
    except httpx.HTTPError:
        return False


def serving_line(state: EngineState | None, phase: StartupPhase) -> str | None:
    """``vLLM serves <name> (<asked for>, …); KV cache: 58,240 tokens …``; None without an engine state."""
    if state is None:
        return None
    asked = state.requested + (", synthetic weights" if state.synthetic else "")
    kv = f"; {phase.kv_cache_line}" if phase.kv_cache_line else ""
    return f"vLLM serves {state.served_name} ({asked}){kv}"


def startup_times_line(facts: StartupFacts | None) -> str | None:
    """``  starts: cold 152 s, warm 24 s / 21 s`` from the log's start attempts (None when none finished)."""
    if facts is None or facts.cold_start_s is None:
        return None
    warm = " / ".join(f"{s:.0f} s" for s in facts.warm_starts_s[-5:])
    return f"  starts: cold {facts.cold_start_s:.0f} s" + (f", warm {warm}" if warm else ", no warm restart yet")
