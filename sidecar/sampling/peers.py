"""GPU memory and energy of other hosts: ``GET /resources/window`` of each sidecar of PEER_SIDECARS (comma-separated
``http(s)://host:port``, or ``dns+http(s)://name:port`` for every address ``name`` resolves to, asked with
``Host: name:port``), with the shared SIDECAR_TOKEN. Failures are :class:`core.report_schema.HostResources` with
``unavailable_reason``; the window is the coordinator's clock (hosts must agree, e.g. NTP)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
from pydantic import ValidationError

from core.report_schema import HostResources

PEER_TIMEOUT_S = 10.0  # connect and read, per peer
MAX_PEERS = 64  # more are cut, with a gap line
WINDOW_PATH = "/resources/window"

Resolver = Callable[[str, int], list[str]]
"""``(name, port) -> addresses`` (IPv4/IPv6 text); raises OSError when the name does not resolve."""


@dataclass(frozen=True)
class PeerTarget:
    """One sidecar to ask: ``url`` as reported, ``base`` to connect to, ``host_header`` to send (None: the URL's)."""

    url: str
    base: str
    host_header: str | None = None


def resolve_addresses(name: str, port: int) -> list[str]:
    """Every address ``name`` resolves to (TCP), in the resolver's order, without repeats. Raises OSError: the name does
    not resolve."""
    infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _unreached(url: str, reason: str, host: str | None = None) -> HostResources:
    return HostResources(host=host or urlsplit(url).hostname or url, url=url, unavailable_reason=reason)


def peer_targets(
    spec: str | None, resolve: Resolver = resolve_addresses
) -> tuple[list[PeerTarget], list[HostResources]]:
    """PEER_SIDECARS as the sidecars to ask, and the entries that name none (unreached hosts with the reason)."""
    targets: list[PeerTarget] = []
    failed: list[HostResources] = []
    for entry in (e.strip().rstrip("/") for e in (spec or "").split(",")):
        if not entry:
            continue
        dns = entry.startswith("dns+")
        url = entry[4:] if dns else entry
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            failed.append(_unreached(entry, "not an http(s):// or dns+http(s):// URL", entry))
            continue
        if not dns:
            targets.append(PeerTarget(url, url))
            continue
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            addresses = resolve(parts.hostname, port)
        except OSError as exc:
            failed.append(_unreached(entry, f"DNS: {parts.hostname} does not resolve ({exc})", parts.hostname))
            continue
        if not addresses:
            failed.append(_unreached(entry, f"DNS: {parts.hostname} has no address", parts.hostname))
        for address in addresses:
            shown = f"[{address}]" if ":" in address else address
            base = f"{parts.scheme}://{shown}:{port}"
            targets.append(PeerTarget(f"{base} ({parts.hostname})", base, parts.netloc))
    if len(targets) > MAX_PEERS:
        skipped = len(targets) - MAX_PEERS
        failed.append(_unreached(targets[MAX_PEERS].url, f"{skipped} peer(s) past {MAX_PEERS} not asked"))
        targets = targets[:MAX_PEERS]
    return targets, failed


def fetch_peer(
    client: httpx.Client, target: PeerTarget, token: str | None, start: float, end: float, idle_end: float | None = None
) -> HostResources:
    """One peer's GPU memory and energy over ``[start, end]`` (Unix s; idle power before ``idle_end``), or its
    failure as a value naming what went wrong."""
    params = {"start": start, "end": end, **({"idle_end": idle_end} if idle_end is not None else {})}
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if target.host_header:
        headers["Host"] = target.host_header
    try:
        answer = client.get(f"{target.base}{WINDOW_PATH}", params=params, headers=headers)
    except httpx.HTTPError as exc:
        return _unreached(target.url, f"GET {WINDOW_PATH} failed ({type(exc).__name__}: {exc})")
    if answer.status_code in (401, 403):
        why = "no SIDECAR_TOKEN here" if not token else "it refused this SIDECAR_TOKEN"
        return _unreached(target.url, f"HTTP {answer.status_code}: {why} (every sidecar needs the same token)")
    if answer.status_code != 200:
        return _unreached(target.url, f"HTTP {answer.status_code} from GET {WINDOW_PATH}: {answer.text[:200]}")
    try:
        found = HostResources.model_validate_json(answer.content)
    except ValidationError as exc:
        return _unreached(target.url, f"the answer is no host's resources ({exc.error_count()} problem(s))")
    return found.model_copy(update={"url": target.url})


def peer_resources(
    spec: str | None,
    token: str | None,
    start: float,
    end: float,
    resolve: Resolver = resolve_addresses,
    timeout_s: float = PEER_TIMEOUT_S,
    idle_end: float | None = None,
) -> list[HostResources]:
    """Every peer of ``spec`` over ``[start, end]``, asked at once (:func:`fetch_peer`); bad entries last. Never
    raises."""
    targets, failed = peer_targets(spec, resolve)
    if not targets:
        return failed
    with httpx.Client(timeout=timeout_s) as client, ThreadPoolExecutor(max_workers=min(8, len(targets))) as pool:
        found = list(pool.map(lambda t: fetch_peer(client, t, token, start, end, idle_end), targets))
    return [*found, *failed]
