"""Which served model a benchmark measures (``/v1/models``)."""

from __future__ import annotations

import requests


def discover_model(base_url: str, fallback: str | None, headers: dict[str, str] | None = None) -> str:
    """The first model ``/v1/models`` lists, for Locust's interactive web UI (``fallback`` or "unknown" when the
    server does not answer or lists none); ``headers`` carry the API key."""
    try:
        data = requests.get(f"{base_url}/v1/models", timeout=10.0, headers=headers).json().get("data")
    except (requests.RequestException, ValueError, AttributeError):
        data = None
    models = data if isinstance(data, list) else []
    ids = [str(m["id"]) for m in models if isinstance(m, dict) and isinstance(m.get("id"), str)]
    return ids[0] if ids else fallback or "unknown"
