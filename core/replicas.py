"""Engine replicas behind vLLM's router: the stack's engines, their ports and URLs, how requests spread.

Functions of REPLICAS, REPLICA_PORT_BASE, ENGINE_URLS, ROUTER_POLICY as the running stack was started with them
(``RUN_DIR/cluster.json``, :func:`as_started`). The router listens on VLLM_PORT (the *front*) with the cluster and, by
default, before the one local engine too, which then switches between two slots (:mod:`core.slots`); one engine
behind the front is still one engine for the reports. ``ENGINE_SWITCH=restart`` runs one engine without the router.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any

from pydantic import TypeAdapter, ValidationError

from core.atomicfile import read_json_object
from core.enginestate import read_engine_state
from core.knobs import client_host
from core.settings import Settings
from core.slots import Slot, active_slot, record_path

CLUSTER_KNOBS = ("replicas", "replica_port_base", "engine_urls", "router_policy", "replica_hosts")
"""The knobs that shape the cluster: ``make up`` records them, later commands read them (:func:`as_started`)."""
_KNOB_SHAPES: dict[str, TypeAdapter[Any]] = {  # each knob's type with its bounds (REPLICAS 0..64 ...)
    name: TypeAdapter(Annotated[Settings.model_fields[name].annotation, Settings.model_fields[name]])  # type: ignore[arg-type]
    for name in CLUSTER_KNOBS
}


def cluster_record(settings: Settings) -> Path:
    """``RUN_DIR/cluster.json``: the cluster knobs of the running stack (JSON object, :data:`CLUSTER_KNOBS`)."""
    return settings.run_dir / "cluster.json"


def record_cluster(settings: Settings) -> None:
    """Write the cluster knobs ``make up`` starts the stack with (``make down`` removes the file).

    Raises:
        OSError: RUN_DIR is not writable.
    """
    path = cluster_record(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {k: getattr(settings, k) for k in CLUSTER_KNOBS}
    record["front"] = _front(settings)  # the topology make up chose: later ENGINE_SWITCH values cannot change it
    path.write_text(json.dumps(record) + "\n")


def as_started(settings: Settings) -> Settings:
    """``settings`` with the recorded cluster knobs of the running stack where this command leaves them unset (knobs
    set here win); no or an unreadable record: ``settings`` as they are."""
    recorded = _recorded(settings)
    update = {}
    for name in CLUSTER_KNOBS:
        if name in recorded and name not in settings.model_fields_set:
            try:  # model_copy does not validate: a value of another shape would surface far from here
                update[name] = _KNOB_SHAPES[name].validate_python(recorded[name])
            except ValidationError:
                continue
    return settings.model_copy(update=update) if update else settings


def _recorded(settings: Settings) -> dict[str, Any]:
    """The record of :func:`record_cluster`; empty when there is none or it is unreadable."""
    return read_json_object(cluster_record(settings)) or {}


@dataclass(frozen=True)
class Replica:
    """One engine: name (``vllm``, ``vllm-K``, ``remote-K``), URL, local replica number (None: ENGINE_URLS)."""

    name: str
    url: str
    index: int | None

    @property
    def local(self) -> bool:
        """True when ``make up`` on this host runs it."""
        return self.index is not None


def _remote_urls(settings: Settings) -> list[str]:
    """ENGINE_URLS split on commas, trailing slashes dropped. Raises ValueError: an entry is no http(s) URL."""
    urls = [u.strip().rstrip("/") for u in (settings.engine_urls or "").split(",") if u.strip()]
    bad = [u for u in urls if not u.startswith(("http://", "https://"))]
    if bad:
        raise ValueError(f"ENGINE_URLS: {', '.join(bad)} is no URL; give http://host:port,... (comma-separated)")
    return urls


def _router_in_use(settings: Settings) -> bool:
    """True when vllm-router fronts the engines: REPLICAS above 1, or engines on other hosts (ENGINE_URLS)."""
    return settings.replicas > 1 or bool(_remote_urls(settings))


def _front(settings: Settings) -> bool:
    """True when the router listens on VLLM_PORT: with the cluster, or one local engine unless ENGINE_SWITCH=restart."""
    return _router_in_use(settings) or (settings.replicas >= 1 and settings.engine_switch != "restart")


def _slot_port(settings: Settings, index: int, slot: Slot) -> int:
    """Slot port of local replica K: a on REPLICA_PORT_BASE+K, b on REPLICA_PORT_BASE+REPLICAS+1+K."""
    return settings.replica_port_base + index + (0 if slot == "a" else settings.replicas + 1)


def router_metrics_port(settings: Settings) -> int:
    """The router's Prometheus port: the one after the last local replica's."""
    settings = as_started(settings)  # the record is read once per call
    return settings.replica_port_base + settings.replicas


def router_in_use(settings: Settings) -> bool:
    """:func:`_router_in_use` of the running stack's knobs (:func:`as_started`): the cluster (several engines)."""
    return _router_in_use(as_started(settings))


def front_in_use(settings: Settings) -> bool:
    """True when the router listens on VLLM_PORT, as ``make up`` recorded it; unrecorded: only with the cluster."""
    recorded = _recorded(settings).get("front")
    return recorded if isinstance(recorded, bool) else _router_in_use(as_started(settings))


def replica_port(settings: Settings, index: int, slot: Slot | None = None) -> int:
    """Port of local replica ``index``: VLLM_PORT without the front, else ``slot``'s (default: the serving one)."""
    started = as_started(settings)
    if not front_in_use(settings):
        return started.vllm_port
    return _slot_port(started, index, slot or active_slot(started.run_dir, index))


def replica_url(settings: Settings, index: int, slot: Slot | None = None) -> str:
    """URL of slot ``slot`` (default: the serving one) of local replica ``index`` (VLLM_PORT's without the front)."""
    started = as_started(settings)
    if not front_in_use(settings):
        return started.vllm_url
    return f"http://{_local_host(started, index)}:{replica_port(settings, index, slot)}"


def engine_url(settings: Settings) -> str:
    """Where vLLM itself answers (``/metrics``, ``/load``, profiler): the clients' URL, except behind the front with
    one local engine and no VLLM_BASE_URL: that engine's serving slot."""
    started = as_started(settings)
    if settings.vllm_base_url or _router_in_use(started) or started.replicas != 1 or not front_in_use(settings):
        return settings.vllm_url
    return replica_url(settings, 0)


@dataclass(frozen=True)
class ServingEngine:
    """The engine serving now: URL, pid and served name from its state file (None: unknown), since when (Unix s)."""

    url: str
    pid: int | None
    served_name: str | None
    since_s: float | None = None

    def describe(self) -> str:
        """``tiny (pid 123 at http://127.0.0.1:8112)``."""
        return f"{self.served_name or 'unknown model'} (pid {self.pid or '?'} at {self.url})"


def serving_engine(settings: Settings) -> ServingEngine:
    """The engine serving now; two calls that differ bracket a switch or restart of vLLM."""
    state = read_engine_state(settings.engine_state_file)
    record = record_path(settings.run_dir)
    times = [state.started_at if state else None, record.stat().st_mtime if record.exists() else None]
    since = max((t for t in times if t is not None), default=None)
    return ServingEngine(engine_url(settings), state.pid if state else None, state.served_name if state else None,
                         since)  # fmt: skip


def switch_marker(before: ServingEngine, after: ServingEngine) -> str | None:
    """The report's ``engine_switch`` when a run's first and last engines differ; None when they are the same."""
    if before == after:
        return None
    when = f" at {time.strftime('%H:%M:%S', time.localtime(after.since_s))}" if after.since_s else ""
    return (f"vLLM was switched during the run{when}, from {before.describe()} to {after.describe()}: its rows hold "
            "answers of both, so it is compared with no other run and is no reference")  # fmt: skip


def _local_host(settings: Settings, index: int = 0) -> str:
    """Host of local replica ``index``: its REPLICA_HOSTS entry, else VLLM_HOST (a wildcard as 127.0.0.1)."""
    hosts = [h.strip() for h in (settings.replica_hosts or "").split(",") if h.strip()]
    if index < len(hosts):
        return hosts[index]
    return client_host(settings.vllm_host)


def replicas(settings: Settings) -> list[Replica]:
    """Every engine of the running stack: local replicas, then ENGINE_URLS (no router: the one engine).

    Raises:
        ValueError: ENGINE_URLS does not parse.
    """
    front = front_in_use(settings)
    settings = as_started(settings)
    if not front:
        return [Replica("vllm", settings.vllm_url, 0)]
    slots = {k: active_slot(settings.run_dir, k) for k in range(settings.replicas)}
    local = [
        Replica("vllm" if k == 0 else f"vllm-{k}",
                f"http://{_local_host(settings, k)}:{_slot_port(settings, k, slots[k])}", k)
        for k in range(settings.replicas)
    ]  # fmt: skip
    return local + [Replica(f"remote-{k}", url, None) for k, url in enumerate(_remote_urls(settings))]


def check_cluster(settings: Settings) -> str | None:
    """Why REPLICAS / ENGINE_URLS / the ports make no cluster (no engine, bad URL, port clash); None when they do."""
    settings = as_started(settings)  # the record is read once per call
    try:
        remote = _remote_urls(settings)
    except ValueError as exc:
        return str(exc)
    if settings.replicas == 0 and not remote:
        return "REPLICAS=0 runs the router only: give ENGINE_URLS=http://host:port,... (or REPLICAS=1 or more)"
    if not _front(settings):
        return None
    taken = {settings.vllm_port: "VLLM_PORT", settings.sidecar_port: "SIDECAR_PORT", settings.ui_port: "UI_PORT",
             settings.locust_web_port: "LOCUST_WEB_PORT"}  # fmt: skip
    ours = [_slot_port(settings, k, "a") for k in range(settings.replicas)]
    ours.append(settings.replica_port_base + settings.replicas)  # the router's metrics port (router_metrics_port)
    ours += [_slot_port(settings, k, "b") for k in range(settings.replicas)]  # where a switch starts the new engines
    clash = [f"{port} ({taken[port]})" for port in ours if port in taken]
    if clash or max(ours) > 65535:
        return (f"REPLICA_PORT_BASE={settings.replica_port_base}: the replicas (both slots) and the router's metrics "
                f"use ports {ours[0]}-{ours[-1]}, which hit {', '.join(clash) or 'the top of the port range'}; "
                "choose another")
    return None


def split_devices(devices: list[str], parts: int) -> list[str]:
    """``devices`` cut into ``parts`` near-equal contiguous comma lists: ``["0","1","2","3"], 2 -> ["0,1", "2,3"]``.

    Raises:
        ValueError: fewer devices than parts (a replica would get none).
    """
    if parts < 1 or len(devices) < parts:
        raise ValueError(f"{len(devices)} device(s) cannot be split between {parts} replica(s): one each at least")
    size, extra = divmod(len(devices), parts)
    bounds = [k * size + min(k, extra) for k in range(parts + 1)]  # the first ``extra`` parts take one more
    return [",".join(devices[start:end]) for start, end in itertools.pairwise(bounds)]


def imbalance_percent(counts: list[int]) -> float | None:
    """The busiest replica above an even share, ``(max / mean - 1) * 100`` %; None without requests."""
    if not counts or sum(counts) == 0:
        return None
    mean = sum(counts) / len(counts)
    return (max(counts) / mean - 1.0) * 100.0


def shares_percent(counts: list[int]) -> list[float | None]:
    """Each replica's share of the requests, percent (None for each when there were none)."""
    total = sum(counts)
    return [100.0 * c / total if total else None for c in counts]


ROUTER_DEFAULT_POLICY = "cache_aware"
"""vllm-router's own --policy default (``vllm-router --help``, version 0.1.17)."""


def router_version() -> str | None:
    """The installed ``vllm-router`` package's version (None when it is not installed here)."""
    try:
        return metadata.version("vllm-router")
    except metadata.PackageNotFoundError:
        return None


def router_fields(settings: Settings) -> dict[str, Any]:
    """The report config's router fields (engines, policy, version); none without the router.

    Raises:
        ValueError: ENGINE_URLS does not parse.
    """
    settings = as_started(settings)  # the record is read once per call
    if not _router_in_use(settings):
        return {}
    engines = settings.replicas + len(_remote_urls(settings))
    return {"replicas": engines, "router_policy": settings.router_policy or ROUTER_DEFAULT_POLICY,
            "router_version": router_version()}  # fmt: skip
