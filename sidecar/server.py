"""The one entrypoint of the sidecar: ``python -m sidecar.server`` (uvicorn on SIDECAR_HOST:SIDECAR_PORT).

Without SIDECAR_TOKEN it makes the token file when it is missing (as ``make up`` does), so its writes are never open;
where that file cannot be made (a read-only secret folder) every write is refused and the log says why.
"""

from __future__ import annotations

import sys

import uvicorn

from core.flags import build_parser, parse
from core.knobs.commands import SIDECAR
from core.net import port_in_use_message
from core.tokenfile import ensure_sidecar_token
from sidecar.api_app import create_app

LIMIT_CONCURRENCY = 256  # open connections (and tasks) at once; more get 503 from uvicorn


def main(argv: list[str] | None = None) -> int:
    """Serve the sidecar (flags: :data:`core.knobs.commands.SIDECAR`); exit 2 when the port is taken or a flag bad."""
    _, settings = parse(build_parser("python -m sidecar.server", __doc__ or "", SIDECAR), argv)
    busy = port_in_use_message(settings.sidecar_host, settings.sidecar_port, "SIDECAR_PORT")
    if busy:
        print(f"[ERROR] {busy}", file=sys.stderr, flush=True)
        return 2
    try:
        ensure_sidecar_token(settings)
    except OSError as exc:
        print(f"[WARN] no sidecar token ({settings.sidecar_token_path}: {exc}): every write is refused", flush=True)
    uvicorn.run(
        create_app(settings),
        host=settings.sidecar_host,
        port=settings.sidecar_port,
        log_level="info",
        proxy_headers=False,  # the client address is the socket's: no X-Forwarded-For from anyone
        server_header=False,
        # Connection bounds (docs/security.md): past LIMIT_CONCURRENCY connections a request is answered 503 at
        # once; an incomplete header block holds at most h11's 16 KiB, an unread body uvicorn's 64 KiB buffer
        # (reading pauses there), so many slow clients cost at most ~LIMIT_CONCURRENCY x 80 KiB; idle keep-alive
        # connections are closed after 5 s. Bodies are bounded in size, time and number by the guard.
        limit_concurrency=LIMIT_CONCURRENCY,
        timeout_keep_alive=5,
        h11_max_incomplete_event_size=16 * 1024,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
