"""The container checks are real (each tool catches a planted fault), plus image hygiene (pinned versions, non-root
users, no baked-in secrets). That the project's own files pass Compose, its schema, hadolint and shellcheck is
checked by ``make lint`` (``scripts/validate_containers.sh``), not here."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from core.settings import PROJECT_ROOT, Settings
from tests.unit.deploy.containers_support import (
    COMPOSE,
    COMPOSE_CPU,
    DOCKERFILES,
    ENV_EXAMPLE,
    SECRET_NAMES,
    ComposeLoader,
    dockerfile_instructions,
    dockerfile_stages,
    load_compose,
    run,
    tool,
)


def test_schema_validation_rejects_a_misspelt_service_key(tmp_path: Path) -> None:
    """The schema check is real: a misspelt key (shm_sise) fails it."""
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("shm_size:", "shm_sise:"))
    result = run([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(broken)])
    assert result.returncode != 0 and "shm_sise" in result.stdout + result.stderr






def test_hadolint_flags_an_unpinned_base_image(tmp_path: Path) -> None:
    """The Dockerfile lint is real: an untagged base image fails it (DL3006)."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nUSER nobody\n")
    result = run([tool("hadolint"), str(bad)])
    assert result.returncode != 0 and "DL3006" in result.stdout








# --- one source of truth with local mode --------------------------------------------------------------------------


def test_images_pin_versions_and_run_as_non_root() -> None:
    """Every base image has an exact version tag, and every stage ends as a non-root user."""
    for dockerfile in DOCKERFILES:
        for stage in dockerfile_stages(dockerfile):
            image = stage[0][1].split()[0]
            assert re.search(r":v?\d+\.\d+\.\d+", image), f"{dockerfile.name}: {image} is not pinned"
            users = [args for keyword, args in stage if keyword == "USER"]
            assert users and users[-1].split(":")[0] not in ("root", "0"), dockerfile.name


def test_engine_images_follow_the_engine_requirements() -> None:
    """The GPU stage's vllm/vllm-openai tag is engine-gpu.txt's vLLM; the CPU stage installs engine-cpu.txt."""
    gpu_pin = re.search(r"^vllm==(\S+)$", (PROJECT_ROOT / "requirements" / "engine-gpu.txt").read_text(), re.M)
    assert gpu_pin
    froms = [stage[0][1].split()[0].split("@")[0] for stage in dockerfile_stages(PROJECT_ROOT / "Dockerfile.vllm")]
    assert f"vllm/vllm-openai:v{gpu_pin[1]}-cu129" in froms  # the CUDA 12.9 build: drivers 575.51+ or 535/550/560/565/570 (docs/gpu.md)
    default_base = Settings(_env_file=None).vllm_gpu_base  # type: ignore[call-arg]
    assert f"ARG VLLM_GPU_BASE={default_base}" in (PROJECT_ROOT / "Dockerfile.vllm").read_text()  # what doctor checks
    text = (PROJECT_ROOT / "Dockerfile.vllm").read_text()
    assert "requirements/engine-cpu.txt" in text
    torch_pin = re.search(r"torch==[\w.+]+", (PROJECT_ROOT / "scripts" / "setup_env.sh").read_text())
    assert torch_pin and torch_pin[0] in text
    assert "pip uninstall -y torchvision torchaudio torchcodec" in text


def test_no_secrets_are_baked_into_images_or_compose() -> None:
    """.env stays out of the build context, Dockerfiles set no secret, compose only forwards them from the host."""
    ignored = (PROJECT_ROOT / ".dockerignore").read_text().splitlines()
    assert ".env" in ignored and ".git" in ignored
    for dockerfile in DOCKERFILES:
        for keyword, args in dockerfile_instructions(dockerfile):
            if keyword in ("ENV", "ARG"):
                assert not any(secret in args for secret in (*SECRET_NAMES, "SECRET", "PASSWORD", "TOKEN")), args
            assert not (keyword in ("COPY", "ADD") and args.split()[0] in (".", "./")), "whole context copied"
    raw = yaml.load(COMPOSE.read_text(), Loader=ComposeLoader)
    for name, service in raw["services"].items():
        for key, value in service["environment"].items():
            if key in SECRET_NAMES:
                assert value in ("", f"${{{key}:-}}"), (name, key, value)


def test_env_example_documents_the_switches_and_is_valid_for_local_mode() -> None:
    """.env.example names the model, token, ports and extra args, and the settings object accepts it."""
    text = ENV_EXAMPLE.read_text()
    documented = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", text, re.M))
    required = {"MODEL", "SERVED_MODEL_NAME", "HF_TOKEN", "VLLM_PORT", "UI_PORT", "SIDECAR_PORT", "LOCUST_WEB_PORT"}
    assert required | {"VLLM_EXTRA_ARGS", "ENGINE_TENSOR_PARALLEL_SIZE", "GPU_DEVICES", "KV_CACHE_GB"} <= documented
    used_by_compose = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", COMPOSE.read_text() + COMPOSE_CPU.read_text()))
    for service in load_compose()["services"].values():  # build arguments without a value come from the environment
        args = service.get("build", {}).get("args", {})
        used_by_compose |= {name for name, value in args.items() if value is None}
    for name in documented:
        assert name.lower() in Settings.model_fields or name in used_by_compose, f"{name} is used nowhere"
    Settings(_env_file=ENV_EXAMPLE)  # type: ignore[call-arg]
