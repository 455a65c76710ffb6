"""Check the Kubernetes manifests (``deploy/kubernetes``) without a cluster: run by ``make lint``.

1. Every document validates against the OpenAPI schemas of ``--kubernetes-version`` (``kubernetes-validate``,
   strict: an unknown key such as ``readinesProbe`` is an error).
2. ``kustomization.yaml`` lists every manifest file, and only existing ones.
3. The stack's own rules (each failure names file, resource and key): pods non-root with RuntimeDefault seccomp;
   containers drop ALL capabilities, no privilege escalation, read-only root, a memory limit; serving containers have
   a readiness probe (the engine's asks ``/health`` and it requests and limits ``nvidia.com/gpu``); pods set
   ``enableServiceLinks: false`` (a Service named ``vllm`` would set VLLM_PORT, which vLLM reads as its own); pods on
   GPUs select and tolerate the GPU nodes; secrets come from a Secret, each workload only its service's.

Exit status: 0 when all hold, 1 naming each failure, 2 when the folder or a file cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.settings import SERVICE_SECRETS  # noqa: E402

WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}
LONG_RUNNING = {"Deployment", "StatefulSet", "DaemonSet"}
ENGINE_COMPONENT = "engine"
GPU_NODE_SELECTOR = {"nvidia.com/gpu.present": "true"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# Which service's secrets each workload (its app.kubernetes.io/component label) may hold.
COMPONENT_SERVICE = {
    "engine": "vllm",
    "ui": "ui",
    "sidecar": "sidecar",
    "locust-master": "locust",
    "locust-worker": "locust",
    "benchmark": "locust",
    "router": None,
}


def documents(folder: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every YAML document of the manifest files in ``folder`` (``kustomization.yaml`` aside), with its file."""
    for path in sorted(folder.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc:
                yield path, doc


def _name(doc: dict[str, Any]) -> str:
    return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"


def pod_problems(doc: dict[str, Any]) -> Iterator[str]:
    """The stack's rules for one workload (see the module's docstring); each problem names the key."""
    template = ((doc.get("spec") or {}).get("template")) or {}
    pod = template.get("spec") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    component = labels.get("app.kubernetes.io/component")
    pod_sec = pod.get("securityContext") or {}
    if pod_sec.get("runAsNonRoot") is not True:
        yield "spec.template.spec.securityContext.runAsNonRoot must be true"
    if (pod_sec.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        yield "spec.template.spec.securityContext.seccompProfile.type must be RuntimeDefault"
    if pod.get("enableServiceLinks") is not False:
        yield ("spec.template.spec.enableServiceLinks must be false (the Service vllm would set VLLM_PORT and "
               "VLLM_SERVICE_* in the pod, which vLLM reads as its own settings)")
    yield from gpu_node_problems(pod)
    if component not in COMPONENT_SERVICE:
        yield f"label app.kubernetes.io/component={component!r} is not one of {sorted(COMPONENT_SERVICE)}"
    service = COMPONENT_SERVICE.get(component or "")
    allowed = SERVICE_SECRETS.get(service, frozenset()) if service else frozenset()
    every_secret = frozenset().union(*SERVICE_SECRETS.values())
    for container in pod.get("containers") or []:
        where = f"containers[{container.get('name')}]"
        sec = container.get("securityContext") or {}
        if sec.get("allowPrivilegeEscalation") is not False:
            yield f"{where}.securityContext.allowPrivilegeEscalation must be false"
        if sec.get("readOnlyRootFilesystem") is not True:
            yield f"{where}.securityContext.readOnlyRootFilesystem must be true"
        if "ALL" not in ((sec.get("capabilities") or {}).get("drop") or []):
            yield f"{where}.securityContext.capabilities.drop must hold ALL"
        limits = (container.get("resources") or {}).get("limits") or {}
        requests = (container.get("resources") or {}).get("requests") or {}
        if "memory" not in limits:
            yield f"{where}.resources.limits.memory is missing"
        if doc.get("kind") in LONG_RUNNING and container.get("ports") and "readinessProbe" not in container:
            yield f"{where}.readinessProbe is missing"
        if component == ENGINE_COMPONENT:
            if "nvidia.com/gpu" not in limits or "nvidia.com/gpu" not in requests:
                yield f"{where}.resources requests and limits must hold nvidia.com/gpu"
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                path = ((container.get(probe) or {}).get("httpGet") or {}).get("path")
                if path != "/health":
                    yield f"{where}.{probe}.httpGet.path must be /health (vLLM's), not {path!r}"
        for env in container.get("env") or []:
            name = env.get("name")
            if name not in every_secret:
                continue
            if "value" in env or "secretKeyRef" not in (env.get("valueFrom") or {}):
                yield f"{where}.env[{name}] is a secret: it must come from a Secret (valueFrom.secretKeyRef)"
            if name not in allowed:
                yield f"{where}.env[{name}]: the {component} workload must not hold this secret"


def gpu_node_problems(pod: dict[str, Any]) -> Iterator[str]:
    """A pod on GPUs (a container requesting ``nvidia.com/gpu`` or setting ``NVIDIA_VISIBLE_DEVICES``) selects the GPU
    nodes and tolerates their taint (:data:`GPU_NODE_SELECTOR`, :data:`GPU_TOLERATION`)."""
    containers = pod.get("containers") or []
    on_gpus = any(
        "nvidia.com/gpu" in ((c.get("resources") or {}).get(kind) or {})
        or any(env.get("name") == "NVIDIA_VISIBLE_DEVICES" for env in c.get("env") or [])
        for c in containers
        for kind in ("requests", "limits")
    )
    if not on_gpus:
        return
    selector = pod.get("nodeSelector") or {}
    for key, value in GPU_NODE_SELECTOR.items():
        if selector.get(key) != value:
            yield f"spec.template.spec.nodeSelector must hold {key}: {value!r} (a pod on GPUs runs on the GPU nodes)"
    if not any(all(t.get(k) == v for k, v in GPU_TOLERATION.items()) for t in pod.get("tolerations") or []):
        yield (f"spec.template.spec.tolerations must tolerate the GPU nodes' taint {GPU_TOLERATION['key']} "
               f"({GPU_TOLERATION['operator']}, {GPU_TOLERATION['effect']})")


def kustomization_problems(folder: Path) -> Iterator[str]:
    """``kustomization.yaml`` lists exactly the manifest files of ``folder``."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text(encoding="utf-8")) or {}
    listed = set(kustomization.get("resources") or [])
    present = {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml"}
    for missing in sorted(present - listed):
        yield f"kustomization.yaml: resources does not list {missing}"
    for extra in sorted(listed - present):
        yield f"kustomization.yaml: resources lists {extra}, which does not exist"


def problems(folder: Path, kubernetes_version: str) -> list[str]:
    """Every failure of the three checks over ``folder``, one line each (empty when the manifests hold)."""
    found = [*kustomization_problems(folder)]
    for path, doc in documents(folder):
        try:
            kubernetes_validate.validate(doc, kubernetes_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(part) for part in exc.path)
            found.append(f"{path.name}: {_name(doc)}: schema: {where}: {exc.message}")
        if doc.get("kind") in WORKLOADS:
            found += [f"{path.name}: {_name(doc)}: {problem}" for problem in pod_problems(doc)]
    return found


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python scripts/check_kubernetes.py [--folder DIR] [--kubernetes-version 1.30.0]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=ROOT / "deploy" / "kubernetes")
    parser.add_argument("--kubernetes-version", default="1.30.0", help="oldest Kubernetes the manifests support")
    args = parser.parse_args(argv)
    try:
        found = problems(args.folder, args.kubernetes_version)
    except (OSError, yaml.YAMLError) as exc:
        print(f"[ERROR] cannot read the manifests in {args.folder}: {exc}", file=sys.stderr)
        return 2
    for line in found:
        print(f"[FAIL] {line}", file=sys.stderr)
    if found:
        print(f"[ERROR] {len(found)} problem(s) in the Kubernetes manifests", file=sys.stderr)
        return 1
    print(f"[ OK ] Kubernetes manifests valid (schemas {args.kubernetes_version}, security, probes, GPU, GPU nodes, "
          "service links, secrets)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
