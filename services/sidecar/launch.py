"""The one entrypoint of the sidecar: ``python -m services.sidecar.launch`` (uvicorn on SIDECAR_HOST:SIDECAR_PORT)."""

from __future__ import annotations

import sys

import uvicorn

from core.net import port_in_use_message
from core.settings import get_settings


def main() -> int:
    """Serve the sidecar; exit 2 with a clear message when the port is taken."""
    settings = get_settings()
    busy = port_in_use_message(settings.sidecar_host, settings.sidecar_port, "SIDECAR_PORT")
    if busy:
        print(f"[ERROR] {busy}", file=sys.stderr, flush=True)
        return 2
    uvicorn.run(
        "services.sidecar.app:app_factory",
        factory=True,
        host=settings.sidecar_host,
        port=settings.sidecar_port,
        log_level="info",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
