"""The hardened compose stack, checked without an engine: per-service secrets, the hardening keys every service keeps
(``scripts/check_hardening.py``, run by ``make validate-containers``: removing any key fails it, naming the key), the
run-state volume for the sidecar token, and the base-image pins with their update script."""

from __future__ import annotations

import copy
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from core.settings import SERVICE_SECRETS, Settings, secret_env_names
from tests.scripts import script_module
from tests.unit.deploy.containers_support import (
    COMPOSE,
    COMPOSE_CPU,
    DOCKERFILES,
    PROJECT_ROOT,
    SECRETS_OF,
    VALIDATE,
    ComposeLoader,
    compose_cli,
    load_compose,
    resolved_config,
    run,
    settings_from,
    tool,
)

CHECK = PROJECT_ROOT / "scripts" / "check_hardening.py"
PIN = PROJECT_ROOT / "scripts" / "pin_base_images.sh"


def check_hardening() -> ModuleType:
    """scripts/check_hardening.py as a module (scripts/ is no package)."""
    return script_module("check_hardening")


def raw_compose() -> dict[str, Any]:
    """docker-compose.yml as YAML (anchors merged, no variable replaced)."""
    return yaml.load(COMPOSE.read_text(encoding="utf-8"), Loader=ComposeLoader)


# --- per-service secrets -------------------------------------------------------------------------------------------


def test_an_empty_secret_variable_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every secret setting reads "" (a compose blank over .env) as unset, never as a password of length 0."""
    for name in sorted(secret_env_names()):
        settings = settings_from({name: ""}, monkeypatch)
        assert getattr(settings, name.lower()) is None, name
        assert getattr(settings_from({name: "x"}, monkeypatch), name.lower()) == "x", name


def test_each_service_blanks_every_secret_it_does_not_need() -> None:
    """.env reaches every container (env_file), so each service's `environment` sets "" for each secret that
    core.settings.SERVICE_SECRETS does not give it, and blanks none that it does."""
    services = raw_compose()["services"]
    assert set(services) == set(SECRETS_OF) and set(SECRETS_OF.values()) == set(SERVICE_SECRETS)
    for name, service in services.items():
        env = service["environment"]
        keep = SERVICE_SECRETS[SECRETS_OF[name]]
        missing = sorted(secret for secret in secret_env_names() - keep if env.get(secret) != "")
        assert not missing, f"{name} does not blank {missing}"
        for secret in keep:
            assert env.get(secret, f"${{{secret}:-}}") == f"${{{secret}:-}}", (name, secret)  # .env's, or the host's


def test_blanked_secrets_are_unset_in_each_service(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every secret in the host environment and .env, each container's settings hold only its own: the
    compose environment (which beats env_file) is applied over them."""
    everything = {name: f"value-of-{name}" for name in secret_env_names()}
    for name in load_compose()["services"]:
        compose_env = {k: str(v) for k, v in load_compose(env=everything)["services"][name]["environment"].items()}
        settings = settings_from({**everything, **compose_env}, monkeypatch)
        held = {secret for secret in secret_env_names() if getattr(settings, secret.lower())}
        assert held == set(SERVICE_SECRETS[SECRETS_OF[name]]), name


# --- the hardening check -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resolved() -> dict[str, dict[str, Any]]:
    """Both resolved configurations (GPU stack, CPU overlay), as `docker compose config` gives them."""
    return {"gpu": resolved_config(COMPOSE), "cpu": resolved_config(COMPOSE, COMPOSE_CPU)}


def test_every_service_is_hardened_in_both_configurations(resolved: dict[str, dict[str, Any]]) -> None:
    """The check finds nothing to report in the GPU stack or the CPU overlay."""
    for kind, config in resolved.items():
        assert check_hardening().compose_problems(config) == [], kind


def test_removing_any_hardening_key_from_any_service_fails_the_check(resolved: dict[str, dict[str, Any]]) -> None:
    """Each key in turn, from each service: the check reports that service and that key."""
    module = check_hardening()
    for name in resolved["cpu"]["services"]:
        for key in module.HARDENING_KEYS:
            config = copy.deepcopy(resolved["cpu"])
            if key == "cpus" and name in module.UNCAPPED_CPUS:  # no CPU cap on the engine by default
                assert key not in config["services"][name] and module.compose_problems(config) == [], name
                config["services"][name][key] = 0
                assert f"{name}: cpus: must be a positive limit" in " ".join(module.compose_problems(config))
                continue
            del config["services"][name][key]
            assert f"{name}: {key}: missing" in module.compose_problems(config), (name, key)


@pytest.mark.parametrize(
    ("key", "value", "reported"),
    [
        ("cap_drop", ["NET_RAW"], "cap_drop: must contain ALL"),
        ("security_opt", ["label=disable"], "security_opt: must contain no-new-privileges"),
        ("read_only", False, "read_only: must be true"),
        ("tmpfs", ["/run"], "tmpfs: must mount /tmp"),
        ("logging", {"driver": "json-file"}, "logging: must be json-file"),
        ("mem_limit", "0", "mem_limit: must be a positive limit"),
        ("pid", "host", "pid: host"),
        ("privileged", True, "privileged: must not be set"),
    ],
)
def test_weakened_keys_fail_the_check(resolved: dict[str, dict[str, Any]], key: str, value: Any, reported: str) -> None:
    """A key that is there but no longer hardens (no ALL, no no-new-privileges, pid: host, ...) is reported too."""
    config = copy.deepcopy(resolved["gpu"])
    config["services"]["ui"][key] = value
    assert any(problem.startswith(f"ui: {reported}") for problem in check_hardening().compose_problems(config))


def test_reports_are_writable_only_in_the_sidecar(resolved: dict[str, dict[str, Any]]) -> None:
    """./reports is mounted only where it is used: read-write in the sidecar (its one writer), nowhere else; a
    read-write mount elsewhere fails the check, a read-only one passes."""
    for name, service in resolved["gpu"]["services"].items():
        mounts = [v for v in service.get("volumes", []) if Path(v.get("source", "")).name == "reports"]
        assert (name == "sidecar") == bool(mounts), name
    config = copy.deepcopy(resolved["gpu"])
    mount = {"type": "bind", "source": str(PROJECT_ROOT / "reports"), "target": "/app/reports"}
    config["services"]["ui"]["volumes"].append(dict(mount))
    assert any("reports must be read-only" in problem for problem in check_hardening().compose_problems(config))
    config["services"]["ui"]["volumes"][-1]["read_only"] = True
    assert check_hardening().compose_problems(config) == []


def test_removing_a_key_from_a_copy_of_the_compose_file_fails_validation(tmp_path: Path) -> None:
    """The command line validate-containers runs: each hardening key removed from a copy of docker-compose.yml (a
    different service each time) makes `docker compose config` + check_hardening.py exit 1 naming service and key."""
    compose = compose_cli()
    keys = check_hardening().HARDENING_KEYS
    services = list(raw_compose()["services"])
    for at, key in enumerate(keys):
        name = services[at % len(services)]
        if key == "cpus" and name in check_hardening().UNCAPPED_CPUS:
            name = next(s for s in services if s not in check_hardening().UNCAPPED_CPUS)
        doc = raw_compose()
        del doc["services"][name][key]
        copy_file = tmp_path / "docker-compose.yml"
        copy_file.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        config = run([*compose, "--env-file", str(PROJECT_ROOT / ".env.example"), "-f", str(copy_file), "config",
                      "--format", "json"])  # fmt: skip
        assert config.returncode == 0, config.stderr
        resolved_file = tmp_path / "resolved.json"
        resolved_file.write_text(config.stdout, encoding="utf-8")
        checked = run([sys.executable, str(CHECK), "--compose", str(resolved_file)])
        assert checked.returncode == 1 and f"{name}: {key}: missing" in checked.stderr, (key, checked.stderr)


def test_validate_containers_fails_when_a_service_loses_its_read_only_root(tmp_path: Path) -> None:
    """`make validate-containers` end to end, on a copy of the container files whose sidecar lost `read_only`: it
    exits non-zero and names the hardening check and the key."""
    for name in ("check-jsonschema", "hadolint", "shellcheck"):
        tool(name)
    compose_cli()
    for path in (*PROJECT_ROOT.glob("docker-compose*.yml"), *DOCKERFILES, PROJECT_ROOT / ".env.example",
                 *PROJECT_ROOT.glob("*.sh")):  # fmt: skip
        shutil.copy(path, tmp_path / path.name)
    for folder in ("scripts", ".ci", "deploy/build-extras", "core", "engine", "stack"):  # + the replicas generator
        shutil.copytree(PROJECT_ROOT / folder, tmp_path / folder)
    doc = raw_compose()
    del doc["services"]["sidecar"]["read_only"]
    (tmp_path / COMPOSE.name).write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    result = subprocess.run(
        ["bash", str(tmp_path / "scripts" / VALIDATE.name)],
        cwd=tmp_path,
        env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "APP_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "[FAIL] hardening of every service" in output and "sidecar: read_only: missing" in output, output


# --- run state for the sidecar token -------------------------------------------------------------------------------


def test_sidecar_token_lives_in_a_run_state_volume_writable_only_by_the_sidecar(monkeypatch: pytest.MonkeyPatch) -> None:
    """Zero config: the sidecar makes its token in the run-state volume at RUN_DIR (the token path's folder);
    locust-master (which runs the benchmark) mounts it read-only and starts after a healthy sidecar; no other
    service has it. The app image makes that folder for the app user, so a fresh volume is theirs."""
    services = load_compose()["services"]
    volumes = {name: [v for v in service["volumes"] if v.startswith("run-state:")] for name, service in services.items()}
    run_dir = "/app/run"
    assert volumes["sidecar"] == [f"run-state:{run_dir}"]
    assert volumes["locust-master"] == [f"run-state:{run_dir}:ro"]
    assert not any(volumes[name] for name in ("vllm", "ui", "locust-worker"))
    assert services["locust-master"]["depends_on"]["sidecar"]["condition"] == "service_healthy"
    for name in ("sidecar", "locust-master"):
        settings = settings_from({k: str(v) for k, v in services[name]["environment"].items()}, monkeypatch)
        assert settings.sidecar_token_path == Path(run_dir) / "sidecar_token", name
    assert "run-state" in load_compose()["volumes"]
    dockerfile = (PROJECT_ROOT / "Dockerfile.ui").read_text(encoding="utf-8")
    assert f"mkdir -p /app/logs /app/reports {run_dir}" in dockerfile
    assert f'chown -R "$APP_UID:$APP_GID" /app/logs /app/reports {run_dir}' in dockerfile


def test_resource_limits_are_variables_with_documented_defaults() -> None:
    """Every service's memory, CPU and pids limits come from a variable with a default; docs/docker.md lists each."""
    docs = (PROJECT_ROOT / "docs" / "docker.md").read_text(encoding="utf-8")
    for name, service in raw_compose()["services"].items():
        for key in ("mem_limit", "cpus", "pids_limit"):
            value = str(service[key])
            assert value.startswith("${") and ":-" in value, (name, key, value)
            variable = value[2:].split(":-")[0]
            assert f"`{variable}`" in docs, f"{variable} is not documented in docs/docker.md"
            assert variable.lower() not in Settings.model_fields, variable  # compose-only, not a setting


# --- base images ---------------------------------------------------------------------------------------------------


def test_base_images_are_pinned_by_digest_or_marked_unpinned() -> None:
    """Each base-image ARG has a sha256 digest or the documented "unpinned" marker on the line above; a tag alone
    fails, as does a marker that stands elsewhere."""
    module = check_hardening()
    for dockerfile in DOCKERFILES:
        assert module.base_image_problems(dockerfile.read_text(encoding="utf-8")) == [], dockerfile.name
    digest = "sha256:" + "0" * 64
    assert module.base_image_problems(f"ARG PYTHON_BASE=python:3.11@{digest}\n") == []
    assert module.base_image_problems(f"{module.UNPINNED_MARKER}\nARG PYTHON_BASE=python:3.11\n") == []
    (problem,) = module.base_image_problems("ARG PYTHON_BASE=python:3.11\n")
    assert problem.startswith("PYTHON_BASE: python:3.11 is pinned by tag only")
    assert module.base_image_problems(f"{module.UNPINNED_MARKER}\n\nARG PYTHON_BASE=python:3.11\n")


def test_pin_script_writes_the_registry_digest_and_drops_the_marker(tmp_path: Path) -> None:
    """`make pin-images` with a stand-in registry: each base ARG gets sha256(raw manifest) after its tag, the
    "unpinned" marker above it goes, --check then passes; before, --check fails and changes nothing."""
    resolver = tmp_path / "resolver"
    resolver.write_text('#!/bin/sh\nprintf "manifest of %s" "$1"\n')
    resolver.chmod(0o755)
    files = [tmp_path / dockerfile.name for dockerfile in DOCKERFILES]
    for dockerfile in DOCKERFILES:
        shutil.copy(dockerfile, tmp_path / dockerfile.name)
    before = [path.read_text() for path in files]
    env = {"PIN_RESOLVER": str(resolver)}
    checked = run(["bash", str(PIN), "--check", *map(str, files)], **env)
    assert checked.returncode == 1 and "[STALE]" in checked.stderr
    assert [path.read_text() for path in files] == before
    assert run(["bash", str(PIN), *map(str, files)], **env).returncode == 0
    text = files[0].read_text()
    module = check_hardening()
    assert module.UNPINNED_MARKER not in text and module.base_image_problems(text) == []
    want = hashlib.sha256(b"manifest of vllm/vllm-openai:v0.32.0-cu129").hexdigest()
    assert f"ARG VLLM_GPU_BASE=vllm/vllm-openai:v0.32.0-cu129@sha256:{want}\n" in text
    assert run(["bash", str(PIN), "--check", *map(str, files)], **env).returncode == 0


def test_secret_overlay_hands_the_token_file_to_the_sidecar_and_the_benchmark(monkeypatch: pytest.MonkeyPatch) -> None:
    """docker-compose.secret.yml: sidecar and locust-master read the token from the compose secret (the settings'
    token path is /run/secrets/sidecar_token, the file comes from run/sidecar_token); nothing else gets it, and the
    hardening still holds."""
    config = resolved_config(COMPOSE, COMPOSE_CPU, PROJECT_ROOT / "docker-compose.secret.yml")
    assert check_hardening().compose_problems(config) == []
    assert Path(config["secrets"]["sidecar_token"]["file"]) == PROJECT_ROOT / "run" / "sidecar_token"
    for name, service in config["services"].items():
        targets = [secret["target"] for secret in service.get("secrets", [])]
        if name in ("sidecar", "locust-master"):
            assert targets == ["/run/secrets/sidecar_token"], name
            settings = settings_from({k: str(v) for k, v in service["environment"].items()}, monkeypatch)
            assert settings.sidecar_token_path == Path("/run/secrets/sidecar_token"), name
        else:
            assert not targets, name


def test_run_time_uid_preflight_and_vllm_names_are_checked(resolved: dict[str, dict[str, Any]]) -> None:
    """validate-containers checks the keys of the GPU path: a numeric run-time user, the engine's preflight, and no
    compose-only VLLM_* name in a service's environment."""
    module = check_hardening()
    for kind, config in resolved.items():
        assert all(":" in str(spec["user"]) for spec in config["services"].values()), kind
        assert config["services"]["vllm"]["environment"]["ENGINE_PREFLIGHT"] == "1", kind
        bad = copy.deepcopy(config)
        bad["services"]["vllm"]["user"] = "app"
        bad["services"]["vllm"]["environment"]["ENGINE_PREFLIGHT"] = "0"
        bad["services"]["vllm"]["environment"]["VLLM_TENSOR_PARALLEL_SIZE"] = "2"
        problems = " ".join(module.compose_problems(bad))
        assert "vllm: user: must be numeric" in problems and "ENGINE_PREFLIGHT must be 1" in problems
        assert "VLLM_TENSOR_PARALLEL_SIZE reaches vLLM" in problems
