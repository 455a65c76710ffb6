"""Which served model a benchmark measures (``/v1/models``)."""

from __future__ import annotations

import requests


def served_models(base_url: str, timeout_s: float = 10.0, headers: dict[str, str] | None = None) -> list[str]:
    """Ids listed by ``/v1/models`` (empty when the server does not answer or lists none); ``headers`` carry the
    API key."""
    try:
        data = requests.get(f"{base_url}/v1/models", timeout=timeout_s, headers=headers).json().get("data")
    except (requests.RequestException, ValueError, AttributeError):
        return []
    if not isinstance(data, list):
        return []
    return [str(m["id"]) for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]


def discover_model(base_url: str, fallback: str | None, headers: dict[str, str] | None = None) -> str:
    """The first served model's id, for Locust's interactive web UI (``fallback`` or "unknown" when none answers)."""
    models = served_models(base_url, headers=headers)
    return models[0] if models else fallback or "unknown"
