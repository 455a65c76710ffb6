"""Decide what vLLM serves: the user's model, the default from the HF cache or hub, or the synthetic stand-in.

Rules (issue #2): an *unset* ``MODEL`` means ERNIE-4.5-0.3B-PT, falling back loudly to ``synthetic:ernie-4.5-0.3b``
when it is neither cached nor downloadable; a model the user *set* that cannot be loaded is an error naming the
model and the cause, never a silent fallback. The probes (the HF cache look-up and the hub, below: the I/O edge) are
injected so the rules are unit-tested offline.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from core.settings import SYNTHETIC_FALLBACK

SYNTHETIC_PREFIX = "synthetic:"
SYNTHETIC_VARIANTS = ("ernie-4.5-0.3b", "tiny")
_HF_ID_RE = re.compile(r"[A-Za-z0-9][\w.\-]*/[\w.\-]+")  # matched whole (fullmatch)

Source = Literal["synthetic", "local", "hf-cache", "hub"]


class ModelResolutionError(RuntimeError):
    """The requested model cannot be served; the message names the model, the cause and what to do."""


@dataclass(frozen=True)
class ResolvedModel:
    """What the launcher passes to vLLM, and why (written to ``logs/engine_state.json``)."""

    requested: str
    source: Source
    model_arg: str
    served_name: str
    synthetic: bool
    synthetic_variant: str | None = None
    fallback_reason: str | None = None


@dataclass(frozen=True)
class HubProbe:
    """Outcome of asking the hub for a repo: ``exists`` is None when the hub could not be reached."""

    exists: bool | None
    detail: str


def default_served_name(model: str) -> str:
    """Readable alias: ``baidu/ERNIE-4.5-0.3B-PT`` -> ``ernie-4.5-0.3b-pt``; ``synthetic:X`` -> ``ernie-X-synthetic``"""
    if model.startswith(SYNTHETIC_PREFIX):
        variant = model[len(SYNTHETIC_PREFIX) :]
        base = variant if variant.startswith("ernie") else f"ernie-{variant}"
        return f"{base}-synthetic"
    return Path(model.rstrip("/")).name.lower()


def resolve_model(
    requested: str,
    *,
    was_set: bool,
    served_name: str | None,
    models_dir: Path,
    cached: Callable[[str], bool],
    probe_hub: Callable[[str], HubProbe],
) -> ResolvedModel:
    """Resolve ``requested`` (``MODEL`` or the default HF id) into what vLLM should load.

    Args:
        was_set: the user set ``MODEL`` (no fallback).
        served_name: ``SERVED_MODEL_NAME``, None for the alias.
        models_dir: where synthetic models are built.
        cached: True when the HF cache holds the repo's config.
        probe_hub: asks the hub whether a repo exists.

    Raises:
        ModelResolutionError: unknown synthetic variant, missing local path, or a set HF id neither cached nor
            downloadable.
    """
    if requested.startswith(SYNTHETIC_PREFIX):
        variant = requested[len(SYNTHETIC_PREFIX) :]
        if variant not in SYNTHETIC_VARIANTS:
            raise ModelResolutionError(
                f"Unknown synthetic model {requested!r}; choose one of "
                + ", ".join(SYNTHETIC_PREFIX + v for v in SYNTHETIC_VARIANTS)
            )
        return ResolvedModel(
            requested=requested,
            source="synthetic",
            model_arg=str(models_dir / variant),
            served_name=served_name or default_served_name(requested),
            synthetic=True,
            synthetic_variant=variant,
        )
    local = Path(requested).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ModelResolutionError(f"Model directory {requested!r} has no config.json: is it a Hugging Face model?")
        return ResolvedModel(
            requested, "local", str(local.resolve()), served_name or default_served_name(requested), False
        )
    if not _HF_ID_RE.fullmatch(requested):
        raise ModelResolutionError(
            f"Model {requested!r} is neither a directory nor a Hugging Face id (owner/name) nor synthetic:NAME. "
            "Check MODEL (or VLLM_MODEL_PATH, the seed image's name for it) for a typo; a folder must exist here."
        )
    name = served_name or default_served_name(requested)
    if cached(requested):
        return ResolvedModel(requested, "hf-cache", requested, name, False)
    probe = probe_hub(requested)
    if probe.exists:
        return ResolvedModel(requested, "hub", requested, name, False)
    if was_set:
        cause = "not found on the Hugging Face hub (typo?)" if probe.exists is False else "hub unreachable"
        raise ModelResolutionError(
            f"Model {requested!r} cannot be loaded: not in the local HF cache and {cause} ({probe.detail}). "
            "Fix MODEL (or VLLM_MODEL_PATH, the seed image's name for it: whichever you set), pre-download it, or "
            "unset it to use the default."
        )
    reason = (
        f"default model {requested} is not in the HF cache and could not be downloaded ({probe.detail}); "
        f"serving {SYNTHETIC_FALLBACK} instead: same architecture, random weights, its text is noise"
    )
    fallback = resolve_model(
        SYNTHETIC_FALLBACK,
        was_set=True,
        served_name=served_name,
        models_dir=models_dir,
        cached=cached,
        probe_hub=probe_hub,
    )
    return replace(fallback, requested=requested, fallback_reason=reason)


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
