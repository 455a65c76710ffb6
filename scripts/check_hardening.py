"""The hardening every compose service must keep, and the base-image pins, checked (``make validate-containers``).

    scripts/check_hardening.py --compose RESOLVED.json ... --dockerfile Dockerfile.ui ...

``RESOLVED.json`` is ``docker compose config --format json`` (anchors, overlays and variables applied: what the
engine gets). Each problem is printed as ``<file>: <service>: <key>: <what is wrong>``; the exit status is 1 when
there is any, 0 otherwise. docs/docker.md ("Hardening") says why each key is there.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

HARDENING_KEYS = (
    "user", "cap_drop", "security_opt", "read_only", "tmpfs", "logging", "mem_limit", "cpus", "pids_limit"
)  # fmt: skip
"""The keys every service must have (removing one fails the check, naming it)."""

UNPINNED_MARKER = "# unpinned: run make pin-images on a host that reaches the registry"
"""The comment line that may stand directly above a base-image ARG which has no digest yet."""

ENGINE_SERVICE = re.compile(r"^vllm(-\d+)?$")
"""The engine's services: ``vllm``, and ``vllm-K`` of the replicas override (run/docker-compose.replicas.yml)."""
UNCAPPED_CPUS = frozenset({"vllm"})
"""Services whose CPU cap may be absent (``cpus: 0`` resolves to no key): the engine is what a benchmark measures,
and Docker refuses a cap above the host's cores (docs/docker.md, "Resource limits"). Memory and pids stay capped."""

ENGINE_ENV = {"ENGINE_PREFLIGHT": "1"}
"""The engine's environment must run make doctor's checks before vLLM starts (engine/doctor.py)."""
COMPOSE_ONLY_VLLM_NAMES = frozenset({"VLLM_TENSOR_PARALLEL_SIZE", "VLLM_SHM_SIZE"})
"""Old compose-only names in VLLM_*'s namespace: vLLM warns about each it does not know (ENGINE_* replace them)."""
_USER = re.compile(r"^\d+(:\d+)?$")

REPORTS_WRITERS = frozenset({"sidecar"})
"""Services that write ./reports (the sidecar is its only writer); anywhere else it may only be mounted read-only."""

_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
_BASE_ARG = re.compile(r"^ARG (\w+_BASE)=(\S+)$")


def _positive(value: Any) -> bool:
    try:
        return float(value) > 0
    except (TypeError, ValueError):
        return False


def _engine(name: str) -> bool:
    """Whether ``name`` is an engine service (:data:`ENGINE_SERVICE`; :data:`UNCAPPED_CPUS` lists the base one)."""
    return name in UNCAPPED_CPUS or bool(ENGINE_SERVICE.match(name))


def service_problems(name: str, spec: dict[str, Any]) -> list[str]:
    """What ``spec`` (one service of a resolved compose configuration) lacks of the hardening, as ``key: why``."""
    found: list[str] = []
    missing = [key for key in HARDENING_KEYS if key not in spec and not (key == "cpus" and _engine(name))]
    found += [f"{key}: missing" for key in missing]
    if "cap_drop" not in missing and "ALL" not in (spec["cap_drop"] or []):
        found.append("cap_drop: must contain ALL")
    if spec.get("cap_add"):
        found.append(f"cap_add: {spec['cap_add']} (no capability is needed)")
    if "security_opt" not in missing and not {"no-new-privileges:true", "no-new-privileges"} & set(
        spec["security_opt"] or []
    ):
        found.append("security_opt: must contain no-new-privileges:true")
    if "read_only" not in missing and spec["read_only"] is not True:
        found.append("read_only: must be true")
    if "tmpfs" not in missing and not any(str(entry).split(":")[0] == "/tmp" for entry in spec["tmpfs"] or []):
        found.append("tmpfs: must mount /tmp (the root filesystem is read-only)")
    if "logging" not in missing:
        logging = spec["logging"] or {}
        options = logging.get("options") or {}
        if logging.get("driver") not in ("json-file", "local") or not {"max-size", "max-file"} <= set(options):
            found.append("logging: must be json-file (or local) with max-size and max-file")
    for key in ("mem_limit", "cpus", "pids_limit"):
        if key in spec and not _positive(spec[key]):
            found.append(f"{key}: must be a positive limit, not {spec[key]!r}")
    if "user" not in missing and not _USER.match(str(spec["user"])):
        found.append(f"user: must be numeric uid:gid (APP_UID:APP_GID), not {spec['user']!r}")
    env = spec.get("environment") or {}
    for variable in sorted(COMPOSE_ONLY_VLLM_NAMES & set(env)):
        found.append(f"environment: {variable} reaches vLLM as an unknown VLLM_* variable (use ENGINE_*)")
    if _engine(name):
        for variable, value in ENGINE_ENV.items():
            if str(env.get(variable)) != value:
                found.append(f"environment: {variable} must be {value} (the engine's preflight)")
    if spec.get("privileged"):
        found.append("privileged: must not be set")
    if spec.get("pid") == "host":
        found.append("pid: host shares the host's processes (see the comment above services: in docker-compose.yml)")
    for volume in spec.get("volumes") or []:
        source = str(volume.get("source", ""))
        writable = volume.get("type") == "bind" and not volume.get("read_only")
        if writable and Path(source).name == "reports" and name not in REPORTS_WRITERS:
            found.append(f"volumes: {source} must be read-only (:ro) here; only {sorted(REPORTS_WRITERS)} write it")
    return found


def compose_problems(config: dict[str, Any]) -> list[str]:
    """Every service's problems (:func:`service_problems`) as ``service: key: why``."""
    services = config.get("services") or {}
    if not services:
        return ["services: none"]
    return [f"{name}: {problem}" for name, spec in services.items() for problem in service_problems(name, spec)]


def base_image_problems(text: str) -> list[str]:
    """Base-image ARGs (``ARG *_BASE=image:tag``) of a Dockerfile that are neither pinned by digest nor marked
    with :data:`UNPINNED_MARKER` on the line above, as ``NAME: why``."""
    found: list[str] = []
    lines = text.splitlines()
    for at, line in enumerate(lines):
        match = _BASE_ARG.match(line.strip())
        if not match:
            continue
        name, image = match.groups()
        if ":" not in image.split("/")[-1].split("@")[0]:
            found.append(f"{name}: {image} has no tag")
        if not _DIGEST.search(image) and (at == 0 or lines[at - 1].strip() != UNPINNED_MARKER):
            found.append(f"{name}: {image} is pinned by tag only (add its digest: make pin-images)")
    return found


def main(argv: list[str] | None = None) -> int:
    """Check the given resolved compose configurations and Dockerfiles; print each problem; 1 if any, else 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compose", type=Path, action="append", default=[], help="docker compose config JSON")
    parser.add_argument("--dockerfile", type=Path, action="append", default=[])
    args = parser.parse_args(argv)
    problems: list[str] = []
    for path in args.compose:
        problems += [f"{path.name}: {problem}" for problem in compose_problems(json.loads(path.read_text("utf-8")))]
    for path in args.dockerfile:
        problems += [f"{path.name}: {problem}" for problem in base_image_problems(path.read_text("utf-8"))]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
