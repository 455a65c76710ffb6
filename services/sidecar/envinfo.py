"""Environment facts for reports: host CPU/RAM, Python, git commit, vLLM version, served model, GPU info."""

from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path
from typing import Any

import httpx
import psutil

from services.report_schema import Environment
from services.settings import PROJECT_ROOT
from services.sidecar.gpu import GpuInfo

GIB = 1024**3


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
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if commit.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def engine_state(state_file: Path) -> dict[str, Any]:
    """The vLLM launcher's record of what it serves (empty when missing or corrupt)."""
    try:
        data = json.loads(state_file.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def vllm_server_facts(vllm_url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """``version`` from ``/version`` and the first model of ``/v1/models`` (``id``, ``root``); {} when unreachable."""
    facts: dict[str, Any] = {}
    try:
        facts["version"] = httpx.get(f"{vllm_url}/version", timeout=timeout_s).json().get("version")
        models = httpx.get(f"{vllm_url}/v1/models", timeout=timeout_s).json().get("data") or []
        if models:
            facts["model_id"] = models[0].get("id")
            facts["model_root"] = models[0].get("root")
            facts["max_model_len"] = models[0].get("max_model_len")
    except (httpx.HTTPError, ValueError):
        pass
    return facts


def collect_environment(
    gpu_info: GpuInfo | None, state: dict[str, Any], server: dict[str, Any], log_version: str | None
) -> Environment:
    """Assemble the report's ``environment`` section from the pieces gathered above."""
    return Environment(
        gpu_model=gpu_info.names[0] if gpu_info and gpu_info.names else None,
        gpu_count=len(gpu_info.names) if gpu_info else 0,
        driver_version=gpu_info.driver_version if gpu_info else None,
        cuda_version=gpu_info.cuda_version if gpu_info else None,
        vllm_version=server.get("version") or log_version,
        model_requested=state.get("requested"),
        model_path=server.get("model_root") or state.get("model_arg"),
        served_model_name=server.get("model_id") or state.get("served_name"),
        synthetic=bool(state.get("synthetic")),
        synthetic_reason=state.get("fallback_reason")
        or ("synthetic model requested: random weights, text is noise" if state.get("synthetic") else None),
        cpu_model=cpu_model(),
        cpu_cores=psutil.cpu_count(logical=True),
        ram_total_gb=round(psutil.virtual_memory().total / GIB, 2),
        python_version=platform.python_version(),
        project_git_commit=git_commit(),
    )
