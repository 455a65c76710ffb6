"""The sidecar's front door: trusted Host and Origin (no DNS rebinding, no cross-site calls), a body size limit, and
the token every state-changing endpoint requires.

- **Host** (400): a request whose ``Host`` is not one of the trusted names (loopback names, ``SIDECAR_HOST``,
  ``SIDECAR_BASE_URL``'s host, ``SIDECAR_TRUSTED_HOSTS``) is refused, so a web page whose name was rebound to
  127.0.0.1 cannot script the API.
- **Origin** (403): a browser request from a page of another host (``Origin`` header) is refused.
- **Body size** (413): ``Content-Length`` above ``SIDECAR_MAX_BODY_MB``, or a chunked body that grows past it, is
  refused before it is held in memory.
- **Token** (401 without, 403 wrong): ``Authorization: Bearer <SIDECAR_TOKEN>`` on every POST/PUT/DELETE
  (:func:`token_dependency`); reads stay open to whoever passes the Host check.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MIB = 1024 * 1024


def host_name(host_header: str) -> str:
    """The name of a ``Host`` header without its port: ``127.0.0.1:8200`` -> ``127.0.0.1``, ``[::1]:8200`` -> ``::1``,
    lower case."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def trusted(name: str, hosts: Sequence[str]) -> bool:
    """True when ``name`` is one of ``hosts`` (``*.example.com`` matches its subdomains, ``*`` everything)."""
    if not name:
        return False
    for pattern in hosts:
        pattern = pattern.lower().strip("[]")
        if pattern == "*" or name == pattern:
            return True
        if pattern.startswith("*.") and name.endswith(pattern[1:]):
            return True
    return False


def origin_host(origin: str) -> str | None:
    """The host name of an ``Origin`` header (``http://localhost:3000`` -> ``localhost``); None for ``null`` or
    garbage."""
    try:
        return urlsplit(origin).hostname
    except ValueError:
        return None


class BodyTooLarge(HTTPException):
    """The request body passed the size limit while it was being read."""

    def __init__(self, limit_bytes: int) -> None:
        detail = f"request body larger than {limit_bytes / MIB:g} MiB (SIDECAR_MAX_BODY_MB)"
        super().__init__(status_code=413, detail=detail)


class RequestGuard:
    """Pure ASGI middleware: Host (400), Origin (403) and body size (413) checks before the app sees a request."""

    def __init__(self, app: ASGIApp, hosts: Sequence[str], max_body_bytes: int) -> None:
        self.app = app
        self.hosts = list(hosts)
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        problem = self.refusal(headers)
        if problem is not None:
            status, text = problem
            await PlainTextResponse(text, status_code=status)(scope, receive, send)
            return
        limit = self.max_body_bytes
        received = 0

        async def bounded_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, bounded_receive, send)

    def refusal(self, headers: Headers) -> tuple[int, str] | None:
        """``(status, text)`` when the headers alone refuse the request, else None."""
        name = host_name(headers.get("host", ""))
        if not trusted(name, self.hosts):
            return 400, f"Invalid host header {name!r}: add it to SIDECAR_TRUSTED_HOSTS if it is yours"
        origin = headers.get("origin")
        if origin is not None and not trusted(origin_host(origin) or "", self.hosts):
            return 403, "Cross-origin request refused (Origin is not a trusted host)"
        length = headers.get("content-length")
        if length is not None:
            if not length.strip().isdigit():
                return 400, "Invalid Content-Length"
            if int(length) > self.max_body_bytes:
                return 413, f"Request body of {int(length)} bytes is larger than {self.max_body_bytes / MIB:g} MiB " \
                    "(SIDECAR_MAX_BODY_MB)"
        return None


_bearer = HTTPBearer(auto_error=False, description="SIDECAR_TOKEN (run/sidecar_token in local mode)")


def token_dependency(token: str | None) -> Callable[..., None]:
    """A FastAPI dependency requiring ``Authorization: Bearer <token>``: 401 without it, 403 with another value;
    with no token configured every call is refused (503), never let through."""
    expected = token.encode("utf-8") if token else None

    def require_token(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
        if expected is None:
            raise HTTPException(
                status_code=503,
                detail="no SIDECAR_TOKEN configured: writes are refused (`make up` makes run/sidecar_token)",
            )
        if credentials is None:
            raise HTTPException(
                status_code=401,
                detail="this endpoint changes state: send Authorization: Bearer <SIDECAR_TOKEN>",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not secrets.compare_digest(credentials.credentials.encode("utf-8"), expected):
            raise HTTPException(status_code=403, detail="wrong sidecar token")

    return require_token
