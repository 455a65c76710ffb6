"""Model resolution rules: user choice, HF cache/hub, and the loud synthetic fallback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.model_resolve import HubProbe, ModelResolutionError, default_served_name, resolve_model

UNREACHABLE = HubProbe(None, "ConnectError: no route")


def resolve(requested: str, was_set: bool, cached: bool = False, probe: HubProbe = UNREACHABLE, tmp: Path = Path("/m")):
    return resolve_model(
        requested, was_set=was_set, served_name=None, models_dir=tmp, cached=lambda _: cached, probe_hub=lambda _: probe
    )


def test_unset_default_falls_back_to_synthetic_loudly() -> None:
    """Default model neither cached nor downloadable: synthetic ERNIE with a reason."""
    resolved = resolve("baidu/ERNIE-4.5-0.3B-PT", was_set=False)
    assert resolved.synthetic and resolved.synthetic_variant == "ernie-4.5-0.3b"
    assert resolved.requested == "baidu/ERNIE-4.5-0.3B-PT"
    assert resolved.fallback_reason and "random weights" in resolved.fallback_reason
    assert resolved.served_name == "ernie-4.5-0.3b-synthetic"


def test_cached_default_is_served_as_is() -> None:
    """A cached default model is served under its readable alias."""
    resolved = resolve("baidu/ERNIE-4.5-0.3B-PT", was_set=False, cached=True)
    assert resolved.source == "hf-cache" and not resolved.synthetic and resolved.served_name == "ernie-4.5-0.3b-pt"


def test_reachable_hub_lets_vllm_download() -> None:
    """A model the hub has is passed to vLLM by id."""
    resolved = resolve("Qwen/Qwen2-0.5B-Instruct", was_set=True, probe=HubProbe(True, "ok"))
    assert resolved.source == "hub" and resolved.model_arg == "Qwen/Qwen2-0.5B-Instruct"


def test_user_set_model_is_never_replaced() -> None:
    """A model the user set that cannot be loaded is an error naming it and the cause."""
    with pytest.raises(ModelResolutionError, match=r"Qwen/Qwen2-0\.5B-Instruct.*hub unreachable"):
        resolve("Qwen/Qwen2-0.5B-Instruct", was_set=True)


def test_typo_on_reachable_hub_says_not_found() -> None:
    """A 404 from the hub is reported as not found (typo?)."""
    with pytest.raises(ModelResolutionError, match="not found"):
        resolve("Qwen/Qwen2-0.5B-Instrct", was_set=True, probe=HubProbe(False, "HTTP 404"))


def test_garbage_model_name_is_rejected() -> None:
    """A name that is no path, no HF id and no synthetic:NAME is refused."""
    with pytest.raises(ModelResolutionError, match="typo"):
        resolve("not a model", was_set=True)


def test_unknown_synthetic_variant_lists_choices() -> None:
    """synthetic:NAME must be a known variant."""
    with pytest.raises(ModelResolutionError, match="synthetic:tiny"):
        resolve("synthetic:huge", was_set=True)


def test_local_directory_needs_config(tmp_path: Path) -> None:
    """A local directory is served when it has config.json, refused otherwise."""
    with pytest.raises(ModelResolutionError, match=r"config\.json"):
        resolve(str(tmp_path), was_set=True)
    (tmp_path / "config.json").write_text("{}")
    assert resolve(str(tmp_path), was_set=True).source == "local"


def test_served_names() -> None:
    """Aliases are lower-case last path parts; synthetic ones say so."""
    assert default_served_name("baidu/ERNIE-4.5-0.3B-PT") == "ernie-4.5-0.3b-pt"
    assert default_served_name("synthetic:tiny") == "ernie-tiny-synthetic"


def test_the_documented_switch_examples_resolve_on_a_fresh_offline_clone() -> None:
    """The README's first model switch (`export VLLM_MODEL_PATH=… && ./start_vllm.sh`) and the offline switch of
    docs/models.md and docs/seed-commands.md name a model that resolves with no folder, no cache and no hub."""
    from core.settings import PROJECT_ROOT

    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    switches = re.findall(r"^export VLLM_MODEL_PATH=(\S+) && \./start_vllm\.sh", readme, re.M)
    models_md = re.findall(r"^VLLM_MODEL_PATH=(\S+) \./start_vllm\.sh", (PROJECT_ROOT / "docs/models.md").read_text(), re.M)
    seed = (PROJECT_ROOT / "docs/seed-commands.md").read_text(encoding="utf-8")
    assert switches and models_md and switches[0] == models_md[0]
    assert f"`export VLLM_MODEL_PATH={switches[0]} && ./start_vllm.sh`" in seed
    resolved = resolve(switches[0], was_set=True, tmp=Path("/nonexistent/models"))
    assert resolved.synthetic and resolved.model_arg.startswith("/nonexistent/models/")
    with pytest.raises(ModelResolutionError):  # what the README showed before: a folder a fresh clone has not
        resolve("/data/qwen2-0.5b-instruct", was_set=True)
