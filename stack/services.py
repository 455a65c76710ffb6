"""The supervised services of local mode (``vllm``, or each serving replica and ``router``; the sidecar, the UI and
Locust), how to ask whether they answer, and `make status`'s engine lines."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from core.enginestate import EngineState
from core.replicas import as_started, front_in_use, replicas, router_metrics_port
from core.report_schema import StartupFacts
from core.settings import Settings
from core.slots import active_slot
from engine.local_replicas import ROUTER_PROGRAM, program_name, program_names
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


def services(settings: Settings) -> list[Service]:
    """Every service of local mode: ``vllm`` on VLLM_PORT, or with the router each replica and then the router
    itself (``router-metrics`` is a port of ``router``, no program); then the sidecar, the UI and Locust."""
    logs = settings.logs_dir
    headers = tuple(settings.vllm_headers.items())  # /v1/models needs the API key when vLLM has one
    if not front_in_use(settings):
        engines = [Service("vllm", f"{settings.vllm_url}/v1/models", settings.vllm_host, settings.vllm_port,
                           "VLLM_PORT", logs / "vllm.log", headers)]  # fmt: skip
    else:
        started = as_started(settings)
        engines = []
        for r in replicas(settings):
            if r.index is None:
                continue
            slot = active_slot(settings.run_dir, r.index)
            name = program_name(r.index, slot)
            offset = r.index + (0 if slot == "a" else started.replicas + 1)
            engines.append(Service(name, f"{r.url}/v1/models", settings.vllm_host, int(r.url.rsplit(":", 1)[1]),
                                   f"REPLICA_PORT_BASE+{offset}", logs / f"{name}.log", headers))  # fmt: skip
        metrics = router_metrics_port(settings)
        engines.append(Service(ROUTER_PROGRAM, f"{settings.vllm_url}/v1/models", settings.vllm_host,
                               settings.vllm_port, "VLLM_PORT", logs / "router.log", headers))  # fmt: skip
        engines.append(Service("router-metrics", f"http://127.0.0.1:{metrics}/metrics", "127.0.0.1", metrics,
                               f"REPLICA_PORT_BASE+{settings.replicas} (router metrics)",
                               logs / "router.log"))  # fmt: skip
    return [
        *engines,
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


def starting_beside(settings: Settings, states: dict[str, dict[str, Any]]) -> list[str]:
    """The programs of non-serving slots that run (a blue/green switch starting its new engine)."""
    serving = set(program_names(settings))
    slots = [program_name(k, slot) for k in range(as_started(settings).replicas) for slot in ("a", "b")]
    return [name for name in slots if name not in serving
            and states.get(name, {}).get("statename") in ("STARTING", "RUNNING", "BACKOFF")]  # fmt: skip
