"""Environment facts for reports (host, Python, project, vLLM build, model, GPUs), each from an explicit source, so
no secret travels into a report through here."""

from __future__ import annotations

import contextlib
import logging
import platform
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil
from pydantic import BaseModel, TypeAdapter

from core.api import ServerFacts
from core.enginestate import EngineState
from core.report_schema import Environment, StartupFacts
from core.settings import PROJECT_ROOT
from core.shapes import MODEL_LIST, MODEL_LIST_SHAPE, ShapeError, answer_as
from core.units import GIB
from engine.vllmlog.tracker import StartupPhase
from sidecar.sampling.gpu import GpuInfo

SNAPSHOT_RE = re.compile(r"/snapshots/([0-9a-f]{40})(?:/|$)")
HF_ID_RE = re.compile(r"[A-Za-z0-9][\w.\-]*/[\w.\-]+")  # matched whole (fullmatch)
COMMIT_RE = re.compile(r"""commit_id\s*=\s*['"]([0-9a-f]{7,40})['"]""")
_T = TypeVar("_T")
log = logging.getLogger(__name__)


def cpu_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo (Linux), else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def git_commit(root: Path = PROJECT_ROOT) -> str | None:
    """Short commit of the project checkout, with ``-dirty`` when it has uncommitted changes; None outside git."""
    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5)

    try:
        commit = git("rev-parse", "--short", "HEAD")
        if commit.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def project_version(root: Path = PROJECT_ROOT) -> str | None:
    """``[project] version`` of the checkout's pyproject.toml; None when unreadable."""
    try:
        version = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    except (OSError, KeyError, TypeError, tomllib.TOMLDecodeError):
        return None
    return str(version)


def vllm_commit(state: EngineState | None) -> str | None:
    """vLLM's git commit from the engine env's ``vllm/_version.py`` (read as text); None when that env is not visible
    here or the build records no commit."""
    if state is None or state.engine_python is None:
        return None
    venv = Path(state.engine_python).parent.parent
    for version_file in sorted(venv.glob("lib/python3*/site-packages/vllm/_version.py")):
        with contextlib.suppress(OSError):
            if match := COMMIT_RE.search(version_file.read_text(encoding="utf-8")):
                return match.group(1)
    return None


def vllm_fingerprint(server: dict[str, Any], version: str | None, commit: str | None) -> str | None:
    """The ``system_fingerprint`` vLLM reports, else ``vllm-<version>[+g<commit>]`` from a server that answered
    without one; None without either or when it did not answer."""
    if server.get("system_fingerprint"):
        return str(server["system_fingerprint"])
    if not version or not server:
        return None
    return f"vllm-{version}" + (f"+g{commit[:12]}" if commit and commit[:7] not in version else "")


def model_revision(model_path: str | None, state: EngineState | None) -> str | None:
    """The HF snapshot hash the model is served from (from its path, or the local HF cache for a hub id); None for
    local folders, synthetic models or an uncached id."""
    if state is not None and state.synthetic:
        return None
    if model_path and (match := SNAPSHOT_RE.search(model_path)):
        return match.group(1)
    repo_id = model_path if model_path and HF_ID_RE.fullmatch(model_path) else (state.requested if state else None)
    if not isinstance(repo_id, str) or not HF_ID_RE.fullmatch(repo_id) or Path(repo_id).exists():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # a malformed cache or id must not stop a report
        return None
    match = SNAPSHOT_RE.search(cached) if isinstance(cached, str) else None
    return match.group(1) if match else None


def _answer(url: str, shape: TypeAdapter[_T], expected: str, timeout_s: float, headers: dict[str, str] | None,
            body: dict[str, Any] | None = None) -> _T | None:
    """``GET url`` (``POST`` with ``body``) read as ``shape``; None (a wrong shape logged) for any other answer."""
    try:
        response = httpx.request("GET" if body is None else "POST", url, json=body, timeout=timeout_s, headers=headers)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        return answer_as(response, shape, expected)
    except ShapeError as exc:
        log.warning("server fact skipped: %s", exc)
        return None


class _Version(BaseModel):
    version: str


class _Fingerprinted(BaseModel):
    system_fingerprint: str | None = None


VERSION = TypeAdapter(_Version)
FINGERPRINTED = TypeAdapter(_Fingerprinted)


def system_fingerprint(
    vllm_url: str, model: str, timeout_s: float = 5.0, headers: dict[str, str] | None = None
) -> str | None:
    """The ``system_fingerprint`` of a one-token completion; None when the server sends none or does not answer."""
    body = {"model": model, "prompt": "fingerprint", "max_tokens": 1, "temperature": 0.0}
    found = _answer(f"{vllm_url}/v1/completions", FINGERPRINTED, "a completion", timeout_s, headers, body)
    return found.system_fingerprint if found is not None and found.system_fingerprint else None


def vllm_server_facts(
    vllm_url: str, timeout_s: float = 5.0, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """``version`` from ``/version``, the first model of ``/v1/models`` (``id``, ``root``, ``max_model_len``) and the
    ``system_fingerprint``, each left out when not answered; ``headers`` carry VLLM_API_KEY."""
    facts: dict[str, Any] = {}
    version = _answer(f"{vllm_url}/version", VERSION, '{"version": "..."}', timeout_s, headers)
    if version is not None:
        facts["version"] = version.version
    listed = _answer(f"{vllm_url}/v1/models", MODEL_LIST, MODEL_LIST_SHAPE, timeout_s, headers)
    if listed is not None and listed.data:
        first = listed.data[0]
        facts.update(model_id=first.id, model_root=first.root, max_model_len=first.max_model_len)
        facts["system_fingerprint"] = system_fingerprint(vllm_url, first.id, timeout_s, headers)
    return facts


def with_fingerprint(
    known: ServerFacts, vllm_url: str, headers: dict[str, str] | None = None, timeout_s: float = 5.0
) -> dict[str, Any]:
    """``known`` (the benchmark's read of the server) as :func:`vllm_server_facts` gives them, with the fingerprint."""
    facts = known.model_dump(exclude_none=True)
    if known.model_id:
        facts["system_fingerprint"] = system_fingerprint(vllm_url, known.model_id, timeout_s, headers)
    return facts


def startup_facts(phase: StartupPhase) -> StartupFacts | None:
    """Cold start, warm restarts and the latest start's phases from the log (None when it shows no start)."""
    if phase.phase == "not_started":
        return None
    # every start that became ready counts, whatever ended it later (a switch's stop, a crash while serving)
    times = [a.startup_s for a in phase.attempts if a.startup_s is not None]
    return StartupFacts(
        phase=phase.phase,
        detail=phase.detail,
        cold_start_s=times[0] if times else None,
        warm_starts_s=times[1:],
        model_load_s=phase.load_s,
        engine_init_s=phase.engine_init_s,
        kv_cache_line=phase.kv_cache_line,
    )


def collect_environment(
    gpu_info: GpuInfo | None,
    state: EngineState | None,
    server: dict[str, Any],
    startup: StartupPhase | None = None,
) -> Environment:
    """The report's ``environment`` section from the facts above (vLLM's version from the server, else the log)."""
    version = server.get("version") or (startup.vllm_version if startup else None)
    commit = vllm_commit(state)
    synthetic = state is not None and state.synthetic
    model_path = server.get("model_root") or (state.model_arg if state else None)
    return Environment(
        gpu_model=gpu_info.names[0] if gpu_info and gpu_info.names else None,
        gpu_count=len(gpu_info.names) if gpu_info else 0,
        gpu_indices=list(gpu_info.indices) if gpu_info else [],
        engine_cuda_runtime=state.engine_cuda_runtime if state else None,
        engine_torch_version=state.engine_torch_version if state else None,
        engine_python_version=state.engine_python_version if state else None,
        driver_version=gpu_info.driver_version if gpu_info else None,
        cuda_version=gpu_info.cuda_version if gpu_info else None,
        vllm_version=version,
        vllm_commit=commit,
        vllm_fingerprint=vllm_fingerprint(server, version, commit),
        model_requested=state.requested if state else None,
        model_path=model_path,
        served_model_name=server.get("model_id") or (state.served_name if state else None),
        model_revision=model_revision(model_path, state),
        synthetic=synthetic,
        synthetic_reason=(state.fallback_reason if state else None)
        or ("synthetic model requested: random weights, text is noise" if synthetic else None),
        cpu_model=cpu_model(),
        cpu_cores=psutil.cpu_count(logical=True),
        ram_total_gb=round(psutil.virtual_memory().total / GIB, 2),
        python_version=platform.python_version(),
        project_version=project_version(),
        project_git_commit=git_commit(),
        startup=startup_facts(startup) if startup else None,
        vllm_args=state.argv[1:] if state else [],
    )
