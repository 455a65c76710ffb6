"""The sidecar's front door, decided from the headers before any body is read: a trusted ``Host`` (400: no DNS
rebinding) and ``Origin`` (403), and on every write ``Authorization: Bearer <SIDECAR_TOKEN>`` (401 without, 403
wrong) and a ``Content-Length`` of at most :data:`MAX_BODY_BYTES` (413; chunked: 411)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

MIB = 1024 * 1024
MAX_BODY_BYTES = 1 * MIB  # a report's body (no rows) is a few KiB


def host_name(host_header: str) -> str:
    """A ``Host`` header's name without port, lower case: ``[::1]:8200`` -> ``::1``."""
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
    """The host name of an ``Origin`` header (``http://localhost:3000`` -> ``localhost``); None for garbage."""
    try:
        return urlsplit(origin).hostname
    except ValueError:
        return None


WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def token_refusal(authorization: str | None, expected: bytes | None) -> tuple[int, str, dict[str, str]] | None:
    """``(status, detail, headers)`` unless ``authorization`` carries the token ``expected`` (503: none configured,
    401: none sent, 403: another); the one token check."""
    if expected is None:
        return 503, "no SIDECAR_TOKEN configured: writes are refused (`make up` makes run/sidecar_token)", {}
    scheme, _, credentials = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        detail = "this endpoint changes state: send Authorization: Bearer <SIDECAR_TOKEN>"
        return 401, detail, {"WWW-Authenticate": "Bearer"}
    if not secrets.compare_digest(credentials.strip().encode("utf-8"), expected):
        return 403, "wrong sidecar token", {}
    return None


def _has_body(headers: Headers) -> bool:
    """True when the request announces a body (a Content-Length above 0, or chunked)."""
    length = headers.get("content-length")
    return "chunked" in headers.get("transfer-encoding", "").lower() or (length is not None and length.strip() != "0")


class RequestGuard:
    """Pure ASGI middleware applying the checks above; a refused write's body is never read (the answer closes the
    connection)."""

    def __init__(
        self, app: ASGIApp, hosts: Sequence[str], max_body_bytes: int = MAX_BODY_BYTES, token: str | None = None
    ) -> None:
        self.app = app
        self.hosts = list(hosts)
        self.max_body_bytes = max_body_bytes
        self.expected = token.encode("utf-8") if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        problem = self.refusal(headers, scope["method"] in WRITE_METHODS)
        if problem is None:
            await self.app(scope, receive, send)
            return
        status, text, extra = problem  # answered with Connection: close when a body is announced (drops it unread)
        extra = {**extra, "Connection": "close"} if _has_body(headers) else extra
        await JSONResponse({"detail": text}, status_code=status, headers=extra)(scope, receive, send)

    def refusal(self, headers: Headers, write: bool = False) -> tuple[int, str, dict[str, str]] | None:
        """``(status, text, headers)`` when the headers alone refuse the request, else None."""
        name = host_name(headers.get("host", ""))
        if not trusted(name, self.hosts):
            return 400, f"Invalid host header {name!r}: add it to SIDECAR_TRUSTED_HOSTS if it is yours", {}
        origin = headers.get("origin")
        if origin is not None and not trusted(origin_host(origin) or "", self.hosts):
            return 403, "Cross-origin request refused (Origin is not a trusted host)", {}
        if not write:
            return None
        denied = token_refusal(headers.get("authorization"), self.expected)
        if denied is not None:
            return denied
        length = headers.get("content-length")
        if length is None:
            if "chunked" in headers.get("transfer-encoding", "").lower():
                return 411, "send the body with a Content-Length (no chunked writes)", {}
            return None
        if not length.strip().isdigit():
            return 400, "Invalid Content-Length", {}
        if int(length) > self.max_body_bytes:
            return 413, f"Request body of {int(length)} bytes is larger than {self.max_body_bytes / MIB:g} MiB: a " \
                "report's body carries the run's id, never its rows", {}
        return None


_bearer = HTTPBearer(auto_error=False, description="SIDECAR_TOKEN (run/sidecar_token in local mode)")


def token_dependency(token: str | None) -> Callable[..., None]:
    """A FastAPI dependency requiring ``Authorization: Bearer <token>`` (:func:`token_refusal`), also shown in the
    OpenAPI docs."""
    expected = token.encode("utf-8") if token else None

    def require_token(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
        header = f"{credentials.scheme} {credentials.credentials}" if credentials is not None else None
        denied = token_refusal(header, expected)
        if denied is not None:
            status, detail, headers = denied
            raise HTTPException(status_code=status, detail=detail, headers=headers or None)

    return require_token
