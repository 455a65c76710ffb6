"""Small network helpers shared by the launchers: busy-port detection and readiness polling."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import httpx


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (the OS's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use_message(host: str, port: int, variable: str) -> str | None:
    """None when ``host:port`` can be bound; else a message saying who to stop or which variable to change."""
    bind_host = "" if host in ("0.0.0.0", "::") else host
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bind_host, port))
        except OSError as exc:
            return (
                f"Port {port} on {host or '0.0.0.0'} is already in use ({exc.strerror}). "
                f"Stop whatever listens there (`ss -ltnp 'sport = :{port}'`) or set {variable} to a free port."
            )
    return None


def wait_for_http(
    url: str,
    timeout_s: float,
    *,
    interval_s: float = 1.0,
    ok: Callable[[httpx.Response], bool] = lambda r: r.status_code == 200,
    abort: Callable[[], str | None] = lambda: None,
    headers: dict[str, str] | None = None,
) -> tuple[bool, str]:
    """Poll ``url`` until ``ok(response)`` (``(True, "")``), ``abort()`` or timeout (``(False, reason)``)."""
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    with httpx.Client(timeout=min(5.0, interval_s * 5), headers=headers) as client:  # one SSL context, not one a poll
        while time.monotonic() < deadline:
            reason = abort()
            if reason:
                return False, reason
            try:
                response = client.get(url)
                if ok(response):
                    return True, ""
                last = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}"
            time.sleep(interval_s)
    return False, f"not ready after {timeout_s:.0f} s ({last})"
