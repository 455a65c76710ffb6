"""Hugging Face cache look-up and hub reachability probe (I/O edge of model resolution)."""

from __future__ import annotations

from pathlib import Path

from engine.model_resolve import HubProbe


def hf_cached(repo_id: str) -> bool:
    """True when the local HF cache holds ``repo_id``'s ``config.json`` (no network)."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json")
    return isinstance(found, str)


def hf_config_dir(repo_id: str) -> Path | None:
    """The HF-cache snapshot folder holding ``repo_id``'s ``config.json``; None when not cached (no network)."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json")
    return Path(found).parent if isinstance(found, str) else None


def fetch_config(
    repo_id: str, timeout_s: float, token: str | None = None, endpoint: str | None = None
) -> tuple[Path | None, str | None]:
    """Download ``repo_id``'s ``config.json`` into the HF cache (where vLLM finds it) so the first start
    plans from the same geometry as later ones; ``(folder, None)`` or ``(None, reason)``, never raises."""
    from huggingface_hub import hf_hub_download

    try:
        found = hf_hub_download(repo_id, "config.json", token=token, endpoint=endpoint, etag_timeout=timeout_s)
    except Exception as exc:  # hub errors, network errors and offline mode all mean "not known before launch"
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
    return Path(found).parent, None


def probe_hub(repo_id: str, timeout_s: float, offline: bool, token: str | None = None) -> HubProbe:
    """Ask the hub whether ``repo_id`` exists within ``timeout_s`` (``token`` finds private and gated repos);
    ``HubProbe`` True, False, or None with the reason when unreachable (or ``offline``); never raises."""
    if offline:
        return HubProbe(None, "HF_HUB_OFFLINE is set")
    import httpx
    from huggingface_hub import constants

    url = f"{constants.ENDPOINT}/api/models/{repo_id}"
    try:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        response = httpx.get(url, timeout=timeout_s, follow_redirects=True, headers=headers)
    except httpx.HTTPError as exc:
        return HubProbe(None, f"{type(exc).__name__}: {exc}")
    if response.status_code == 200:
        return HubProbe(True, "found on the hub")
    if response.status_code in (401, 404):
        return HubProbe(False, f"hub answered HTTP {response.status_code}")
    return HubProbe(None, f"hub answered HTTP {response.status_code}")
