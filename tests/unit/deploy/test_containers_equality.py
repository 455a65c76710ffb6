"""Containers run what local mode runs: same entrypoints, environment, logs and defaults as deploy/supervisord.conf
and the launchers."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from core.settings import PROJECT_ROOT, Settings
from engine.launcher import vllm_argv
from engine.model_resolve import ResolvedModel
from loadgen.orchestrate.locust_launch import LOCUSTFILE, locust_argv
from stack.control import supervisor_env
from tests.unit.deploy.containers_support import (
    _VAR,
    COMPOSE,
    COMPOSE_CPU,
    CONTAINER_ROOT,
    DOCKERFILES,
    INTERPRETERS,
    JIT_CACHES,
    LOG_WRAPPER,
    NON_SETTINGS_ENV,
    PROGRAMS,
    dockerfile_stages,
    load_compose,
    resolved_config,
    run,
    service_command,
    service_env,
    settings_from,
    supervisord_programs,
)


def test_local_mode_has_one_program_per_service() -> None:
    """Engine variants (profiler, model switch) are launch requests to program:vllm, not twin programs."""
    assert supervisord_programs(on_demand=True) == {}
    assert sorted(supervisord_programs()) == sorted(PROGRAMS)


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
    """vllm, ui, sidecar and locust-master append stdout+stderr to the logs/<name>.log that supervisord writes, rotated
    at the same size keeping as many files (vLLM's launcher from the same settings; the others through
    `python -m stack.logsink`); no service uses `tee -a`, which never rotates."""
    services = load_compose()["services"]
    for program, section in supervisord_programs().items():
        name = PROGRAMS[program][0]
        _, log = service_command(services[name])
        assert section["stdout_logfile"] == f"%(ENV_LOGS_DIR)s/{log}", (name, log)
        assert section.getboolean("redirect_stderr")
        mounts = services[name]["volumes"]
        assert f"./logs:{service_env(name)['LOGS_DIR']}" in mounts
        script = (services[name].get("command") or [""])[-1]
        assert "tee" not in script, (name, script)
        if name == "vllm":
            assert section["stdout_logfile_maxbytes"] == "%(ENV_STACK_VLLM_LOG_MAX_BYTES)s"  # VLLM_LOG_MAX_MB
            continue
        match = LOG_WRAPPER.match(script)
        assert match, (name, script)
        assert f"{match['max_mb']}MB" == section["stdout_logfile_maxbytes"], (name, match["max_mb"])
        assert match["backups"] == section["stdout_logfile_backups"], (name, match["backups"])


def test_vllm_writes_and_rotates_its_own_log_in_compose(monkeypatch: pytest.MonkeyPatch) -> None:
    """The vllm service runs the launcher itself (no shell, no tee) with VLLM_LOG_TO_FILE, so it writes logs/vllm.log
    rotated at VLLM_LOG_MAX_MB keeping VLLM_LOG_BACKUPS, as supervisord does in local mode."""
    service = load_compose()["services"]["vllm"]
    assert service["entrypoint"] == ["python3", "-m", "engine.launcher"] and "command" not in service
    settings = settings_from(service_env("vllm"), monkeypatch)
    assert settings.vllm_log_to_file and settings.vllm_log_file == CONTAINER_ROOT / "logs" / "vllm.log"


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
    """What stack/control.py sets for every program (LOGS_DIR, REPORTS_DIR, PYTHONUNBUFFERED) is set in compose."""
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
            if field.endswith(("_dir", "_file")) and isinstance(getattr(defaults, field, None), Path):
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
    assert checked >= 4  # the four ports (KV_CACHE_GB and VLLM_DTYPE: blank, the host decides)


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
    tp2 = vllm_argv(settings_from(service_env("vllm", {"ENGINE_TENSOR_PARALLEL_SIZE": "2"}), monkeypatch), resolved)
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
    """loadgen.orchestrate.locust_launch builds the same Locust command line from the compose env, but for the URL and web host."""
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
    """loadgen.orchestrate.locust_launch appends LOCUST_EXTRA_ARGS to the web-UI command line, never to the benchmark's headless one."""
    if "locust_extra_args" not in Settings.model_fields:
        pytest.skip("LOCUST_EXTRA_ARGS is not a setting yet: loadgen.orchestrate.locust_launch runs master and workers standalone")
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


def healthcheck_probe(service: dict[str, Any]) -> tuple[str, str]:
    """``(interpreter, python code)`` of a service's ``CMD-SHELL python -c "..."`` healthcheck, ``${VAR}`` kept."""
    kind, command = service["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    interpreter, flag, code = shlex.split(command)
    assert flag == "-c"
    return interpreter, code


def test_vllm_healthcheck_probes_health_with_a_long_start_period() -> None:
    """vLLM's healthcheck asks /health on VLLM_PORT and allows 10+ minutes for download, load and compile."""
    services = load_compose()["services"]
    interpreter, code = healthcheck_probe(services["vllm"])
    assert interpreter == "python3" and "/health" in code and "${VLLM_PORT}" in code
    match = re.fullmatch(r"(\d+)m", services["vllm"]["healthcheck"]["start_period"])
    assert match and int(match[1]) >= 10
    for name, service in services.items():
        if "healthcheck" in service:
            _, code = healthcheck_probe(service)
            port = re.search(r"\$\{(\w+_PORT)\}", code)
            assert port and port[1] in service_env(name), name  # the shell expands the service's own port
            compile(code.replace(port[0], "8000"), f"{name} healthcheck", "exec")


def test_healthchecks_survive_podmans_argument_splitting() -> None:
    """No healthcheck is a CMD list with a space inside an argument: Podman's Docker API splits those at spaces
    (containers/podman#26519), and the check then never passes; CMD-SHELL strings reach /bin/sh whole."""
    for name, service in load_compose()["services"].items():
        test = service.get("healthcheck", {}).get("test")
        if not test:
            continue
        kind, *argv = test
        assert kind == "CMD-SHELL" or not any(re.search(r"\s", arg) for arg in argv), (name, test)


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


def test_the_engines_jit_caches_last_and_its_gpus_are_in_pci_order() -> None:
    """Every JIT cache of the GPU engine (:data:`JIT_CACHES`) is in a named volume of the vllm service, the same path
    in compose and in the image's gpu stage, never on the $HOME or /tmp tmpfs (rebuilt at every start); the gpu stage
    numbers GPUs in PCI order (CUDA_DEVICE_ORDER), as NVML does, whether or not GPU_DEVICES is set."""
    vllm = load_compose()["services"]["vllm"]
    named = [target for source, target, *_ in (v.split(":") for v in vllm["volumes"]) if source[0] not in "./~$"]
    tmpfs = [entry.split(":")[0] for entry in vllm["tmpfs"]]
    compose_env = service_env("vllm")
    (gpu,) = [stage for stage in dockerfile_stages(PROJECT_ROOT / "Dockerfile.vllm") if stage[0][1].endswith(" AS gpu")]
    image_env = dict(item.split("=", 1) for keyword, args in gpu if keyword == "ENV" for item in shlex.split(args))

    def under(path: str, folders: list[str]) -> bool:
        return any(path == folder or path.startswith(folder.rstrip("/") + "/") for folder in folders)

    assert len(JIT_CACHES) == 6
    for name in JIT_CACHES:
        assert compose_env[name] == image_env[name], name
        assert under(compose_env[name], named) and not under(compose_env[name], tmpfs), (name, compose_env[name])
    assert image_env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_no_service_shares_the_host_pid_namespace() -> None:
    """No `pid: host` (the sidecar sees vLLM's pid namespace recorded in engine_state.json instead, and reports its
    process memory as unavailable), and the compose file says why there is none."""
    for name, service in load_compose()["services"].items():
        assert "pid" not in service, name
    assert "No `pid: host` anywhere" in COMPOSE.read_text()


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
