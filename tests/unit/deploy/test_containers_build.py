"""How the images get built anywhere: base images as build arguments, extra build contexts with empty stand-ins,
Podman's builds derived from the compose configuration, Podman settings kept in the project's own file."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import script_module
from tests.unit.deploy.containers_support import (
    COMPOSE,
    COMPOSE_CPU,
    DOCKERFILES,
    PROJECT_ROOT,
    dockerfile_base_args,
    dockerfile_instructions,
    dockerfile_stages,
    resolved_config,
)

EXTRAS = PROJECT_ROOT / "deploy" / "build-extras"
OFFICIAL = {"PYTHON_BASE": "python:3.11.14-slim-bookworm", "VLLM_GPU_BASE": "vllm/vllm-openai:v0.32.0-cu129"}


def compose_build() -> ModuleType:
    """scripts/compose_build.py as a module (scripts/ is no package)."""
    return script_module("compose_build")


def mounted_contexts(dockerfile: Path) -> set[str]:
    """Names in ``RUN --mount=...,from=NAME`` of a Dockerfile."""
    runs = " ".join(args for keyword, args in dockerfile_instructions(dockerfile) if keyword == "RUN")
    return set(re.findall(r"--mount=\S*\bfrom=([\w-]+)", runs))


def test_base_images_are_build_arguments_defaulting_to_the_official_images() -> None:
    """Every image stage starts FROM ${ARG}; the defaults are the pinned official images, the same in both files."""
    for dockerfile in DOCKERFILES:
        defaults = dockerfile_base_args(dockerfile)
        froms = [args for keyword, args in dockerfile_instructions(dockerfile) if keyword == "FROM"]
        for line in froms:
            image = line.split()[0]
            assert image == "scratch" or re.fullmatch(r"\$\{(\w+)\}", image), (dockerfile.name, line)
        assert {name: defaults[name].split("@")[0] for name in defaults if name in OFFICIAL} == {
            name: OFFICIAL[name] for name in OFFICIAL if name in defaults
        }, dockerfile.name  # the tags; scripts/check_hardening.py checks the digests
        assert "PYTHON_BASE" in defaults, dockerfile.name
    assert len({dockerfile_base_args(dockerfile)["PYTHON_BASE"] for dockerfile in DOCKERFILES}) == 1  # one pin


def test_compose_passes_the_base_image_only_when_it_is_set() -> None:
    """Unset PYTHON_BASE leaves the Dockerfiles' default; set, it reaches every image built on Python."""
    plain = resolved_config(COMPOSE, COMPOSE_CPU)["services"]
    assert all("PYTHON_BASE" not in service["build"]["args"] for service in plain.values())
    local = resolved_config(COMPOSE, COMPOSE_CPU, PYTHON_BASE="localhost/base:1")["services"]
    assert {service["build"]["args"]["PYTHON_BASE"] for service in local.values()} == {"localhost/base:1"}


def test_every_extra_build_context_has_an_empty_stand_in_and_a_compose_default() -> None:
    """Each context a RUN mounts is a `FROM scratch AS NAME` stage (plain `docker build` works without it), and
    compose hands it in, by default from deploy/build-extras, which holds neither a CA bundle nor a wheel."""
    contexts = resolved_config(COMPOSE, COMPOSE_CPU)["services"]
    for dockerfile in DOCKERFILES:
        stand_ins = {
            stage[0][1].split()[-1]
            for stage in dockerfile_stages(dockerfile, context_stand_ins=True)
            if stage[0][1].split()[0] == "scratch"
        }
        assert mounted_contexts(dockerfile) == stand_ins, dockerfile.name
        for service in contexts.values():
            if service["build"]["dockerfile"] == dockerfile.name:
                assert set(service["build"]["additional_contexts"]) == stand_ins, dockerfile.name
                assert {Path(path) for path in service["build"]["additional_contexts"].values()} == {EXTRAS}
    assert not (EXTRAS / "ca-certificates.crt").exists() and not list(EXTRAS.glob("*.whl"))


def test_podman_builds_follow_the_compose_configuration(tmp_path: Path) -> None:
    """One `podman build` per image, in Docker format, with the service's target, build args and contexts."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    config = resolved_config(COMPOSE, COMPOSE_CPU, PYTHON_BASE="localhost/base:1", TORCH_WHEELS_DIR=str(wheels))
    commands = compose_build().build_commands(config, "scripts/container_engine.sh podman")
    by_image = {argv[argv.index("--tag") + 1]: argv for argv in commands}
    assert sorted(by_image) == sorted({service["image"] for service in config["services"].values()})
    vllm = by_image[config["services"]["vllm"]["image"]]
    assert vllm[:3] == ["scripts/container_engine.sh", "podman", "build"]
    assert vllm[vllm.index("--format") + 1] == "docker"  # the OCI format would drop SHELL (bash, pipefail)
    assert vllm[vllm.index("--target") + 1] == "cpu"
    assert "PYTHON_BASE=localhost/base:1" in vllm and f"torch-wheels={wheels}" in vllm
    assert vllm[-1] == str(PROJECT_ROOT) and vllm[vllm.index("--file") + 1] == str(PROJECT_ROOT / "Dockerfile.vllm")


def test_podman_build_plan_refuses_a_missing_context_folder_and_a_clashing_image(tmp_path: Path) -> None:
    """A context folder that does not exist (Buildah would read it as an image name) and one image built two ways
    stop the plan with the reason."""
    missing = resolved_config(COMPOSE, COMPOSE_CPU, TORCH_WHEELS_DIR=str(tmp_path / "nope"))
    with pytest.raises(SystemExit, match="torch-wheels"):
        compose_build().build_commands(missing)
    clash = resolved_config(COMPOSE, COMPOSE_CPU)
    clash["services"]["ui"]["build"]["args"]["APP_UID"] = "4242"
    with pytest.raises(SystemExit, match="two different ways"):
        compose_build().build_commands(clash)


def test_podman_settings_live_in_the_project() -> None:
    """deploy/containers.conf holds what this kind of host needs (runc, cgroupfs, no default ulimits, netavark), and
    the engine script reads it through CONTAINERS_CONF instead of writing /etc."""
    conf = tomllib.loads((PROJECT_ROOT / "deploy" / "containers.conf").read_text(encoding="utf-8"))
    assert conf["engine"]["runtime"] == "runc" and conf["engine"]["cgroup_manager"] == "cgroupfs"
    assert conf["containers"]["default_ulimits"] == []
    assert conf["network"]["network_backend"] == "netavark"
    script = (PROJECT_ROOT / "scripts" / "container_engine.sh").read_text(encoding="utf-8")
    assert "export CONTAINERS_CONF=$root/deploy/containers.conf" in script
    for path in (PROJECT_ROOT / "scripts").glob("*.sh"):
        assert not re.search(r">\s*/etc/containers", path.read_text(encoding="utf-8")), path.name
