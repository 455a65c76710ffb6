"""The hardening of docker-compose.yml as the running containers have it (``make compose-test``): read-only root, no
capabilities, no privilege gain, the limits, own pid namespaces, bounded logs written by the services themselves, the
sidecar token in the run-state volume, each container holding only its own secrets. Each check reads the container's
own /proc and cgroup files and environment through ``compose exec``, so it holds on whichever engine runs the stack."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from core.settings import SERVICE_SECRETS, secret_env_names
from tests.compose.conftest import ComposeStack

SERVICES = ("vllm", "ui", "sidecar", "locust-master", "locust-worker")
# What each service writes to logs/ itself (the launcher for vLLM, `python -m stack.logsink` for the others).
OWN_LOG = {"vllm": "vllm.log", "ui": "ui.log", "sidecar": "sidecar.log", "locust-master": "locust.log"}
# compose service -> its entry in core.settings.SERVICE_SECRETS.
SECRETS_OF = {"vllm": "vllm", "ui": "ui", "sidecar": "sidecar", "locust-master": "locust", "locust-worker": "locust"}

# Runs inside a container (python3 is in both images): facts about PID 1 and the container, as JSON.
PROBE = r"""
import json, os

def read(*paths):
    for path in paths:
        try:
            with open(path) as fh:
                return fh.read().strip()
        except OSError:
            pass
    return None

status = dict(line.split(":", 1) for line in open("/proc/1/status") if ":" in line)
try:
    open("/probe-write", "w").close()
    root = "writable"
except OSError as exc:
    root = exc.strerror
try:
    open("/tmp/probe-write", "w").close()
    tmp = "writable"
except OSError as exc:
    tmp = exc.strerror
cmdlines = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    line = read(f"/proc/{pid}/cmdline")
    if line:
        cmdlines.append(line.replace("\0", " ").strip())
quota = read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
period = read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
if quota is None and read("/sys/fs/cgroup/cpu.max"):
    quota, period = read("/sys/fs/cgroup/cpu.max").split()
print(json.dumps({
    "cap_eff": int(status["CapEff"], 16),
    "no_new_privs": int(status["NoNewPrivs"]),
    "root": root,
    "tmp": tmp,
    "memory": read("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"),
    "pids": read("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max"),
    "cpus": int(quota) / int(period) if quota not in (None, "max", "-1") else None,
    "pid_ns": os.readlink("/proc/self/ns/pid"),
    "cmdlines": cmdlines,
    "run": sorted(os.listdir("/app/run")) if os.path.isdir("/app/run") else None,
    "env": sorted(name for name, value in os.environ.items() if value),  # names only, never values
}))
"""


_probed: dict[str, dict[str, Any]] = {}


def probe(stack: ComposeStack, service: str) -> dict[str, Any]:
    """The probe's facts from inside ``service``'s container (asked once per test session)."""
    if service not in _probed:
        result = stack.compose("exec", "-T", service, "python3", "-c", PROBE)
        assert result.returncode == 0, result.stderr
        _probed[service] = json.loads(result.stdout.strip().splitlines()[-1])
    return _probed[service]


def limits(stack: ComposeStack, service: str) -> dict[str, Any]:
    """``service``'s mem_limit (bytes), cpus and pids_limit in the stack's resolved compose configuration."""
    result = stack.compose("config", "--format", "json")
    assert result.returncode == 0, result.stderr
    spec = json.loads(result.stdout)["services"][service]
    return {key: spec.get(key) for key in ("mem_limit", "cpus", "pids_limit")}


@pytest.mark.parametrize("service", SERVICES)
def test_containers_run_hardened(stack: ComposeStack, service: str) -> None:
    """Read-only root with a writable /tmp, no capabilities, no privilege gain, and the configured memory, CPU and
    process limits in force."""
    facts = probe(stack, service)
    assert facts["root"] == "Read-only file system" and facts["tmp"] == "writable", facts
    assert facts["cap_eff"] == 0 and facts["no_new_privs"] == 1, facts
    want = limits(stack, service)
    assert int(facts["memory"]) == int(want["mem_limit"]), (facts["memory"], want)
    assert int(facts["pids"]) == int(want["pids_limit"]), (facts["pids"], want)
    assert facts["cpus"] == pytest.approx(float(want["cpus"])), (facts["cpus"], want)


def test_each_container_has_its_own_pid_namespace(stack: ComposeStack) -> None:
    """No `pid: host`: every container has its own pid namespace, and engine_state.json records vLLM's."""
    namespaces = {service: probe(stack, service)["pid_ns"] for service in SERVICES}
    assert len(set(namespaces.values())) == len(SERVICES), namespaces
    state = json.loads((stack.logs_dir / "engine_state.json").read_text(encoding="utf-8"))
    assert state["pid_namespace"] == namespaces["vllm"], (state, namespaces)


def test_services_write_their_own_rotated_logs(stack: ComposeStack) -> None:
    """vLLM's launcher writes logs/vllm.log itself; the UI, sidecar and Locust master pipe through
    `python -m stack.logsink`; no container runs `tee`."""
    for service, log in OWN_LOG.items():
        assert (stack.logs_dir / log).stat().st_size > 0, log
        cmdlines = probe(stack, service)["cmdlines"]
        assert not any(line.split()[0].endswith("tee") for line in cmdlines), (service, cmdlines)
        if service != "vllm":
            assert any(f"-m stack.logsink /app/logs/{log} " in line for line in cmdlines), (service, cmdlines)
    engine = probe(stack, "vllm")["cmdlines"]
    assert any("engine.launcher" in line for line in engine), engine


def test_sidecar_token_lives_in_the_run_state_volume(stack: ComposeStack) -> None:
    """The sidecar made its token file in the run-state volume with no pre-step; locust-master sees it read-only;
    the UI, vLLM and the workers do not have it at all (the app image's empty /app/run, or none)."""
    assert probe(stack, "sidecar")["run"] == ["sidecar_token"]
    assert probe(stack, "locust-master")["run"] == ["sidecar_token"]
    write = stack.compose("exec", "-T", "locust-master", "python3", "-c", "open('/app/run/x', 'w')")
    assert write.returncode != 0 and "Read-only file system" in write.stderr + write.stdout
    for service in ("ui", "vllm", "locust-worker"):
        assert not probe(stack, service)["run"], service


def test_each_container_holds_only_its_own_secrets(stack: ComposeStack) -> None:
    """Every secret is in the containers' env_file (make compose-test writes one); inside each container exactly the
    secrets core.settings.SERVICE_SECRETS gives that service are set, the others are blank."""
    given = set(stack.env_file) & secret_env_names()
    if not given:
        pytest.skip("no secrets in the containers' env_file (make compose-test sets APP_ENV_FILE with some)")
    for service in SERVICES:
        held = set(probe(stack, service)["env"]) & secret_env_names()
        assert held == given & SERVICE_SECRETS[SECRETS_OF[service]], (service, sorted(held))


def test_vllm_requires_the_api_key_from_the_env_file(stack: ComposeStack) -> None:
    """vLLM in its container got VLLM_API_KEY and refuses /v1 without it; with it, the model is listed."""
    key = stack.env_file.get("VLLM_API_KEY")
    if not key:
        pytest.skip("no VLLM_API_KEY in the containers' env_file")
    url = f"{stack.url('VLLM_PORT')}/v1/models"
    assert httpx.get(url, timeout=10).status_code == 401
    answer = httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=10)
    assert answer.status_code == 200 and answer.json()["data"], answer.text
