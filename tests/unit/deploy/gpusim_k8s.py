"""The Kubernetes manifests' GPU-facing pods on simulated nodes (tests/unit/deploy/test_gpu_host_sim.py).

What the kubelet, the scheduler and NVIDIA's device plugin would make of deploy/kubernetes/: where a pod may run
(nodeSelector, the GPU nodes' ``nvidia.com/gpu:NoSchedule`` taint, ``nvidia.com/gpu`` capacity), its environment
(the image's ENV, then the Services' links unless ``enableServiceLinks: false`` — the kubelet adds them only where the
container's own env does not name them —, then ``envFrom`` ConfigMaps, then ``env``), its mounts and user, and its
GPUs: those the device plugin allocates for an ``nvidia.com/gpu`` limit, else every GPU of the node where
NVIDIA_VISIBLE_DEVICES=all (the NVIDIA runtime, the GPU nodes' default), else none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from core.settings import PROJECT_ROOT
from tests.unit.deploy.gpusim import Container, SimHost

MANIFESTS = PROJECT_ROOT / "deploy" / "kubernetes"
SECRETS = {"VLLM_API_KEY": "sim-vllm-key-0123456789", "SIDECAR_TOKEN": "sim-sidecar-token-0123456789"}
"""The Secret llm-serve-bench-secrets of the simulated cluster (HF_TOKEN absent: it is optional)."""


@dataclass(frozen=True)
class Node:
    """A node: name, labels, NoSchedule taints (keys) and its cards."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[str, ...]
    host: SimHost


def gpu_node(host: SimHost) -> Node:
    """A GPU node as the GPU Operator labels and taints it."""
    return Node(f"gpu-{host.label}", {"nvidia.com/gpu.present": "true"}, ("nvidia.com/gpu",), host)


def cpu_node() -> Node:
    """A node without GPUs (the UI, Locust ...)."""
    return Node("cpu-1", {}, (), SimHost("cpu", (), ""))


def load(docs: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Every document of deploy/kubernetes/*.yaml (``docs``: file name -> replacement text)."""
    out: list[dict[str, Any]] = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        text = (docs or {}).get(path.name, path.read_text(encoding="utf-8"))
        out += [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    return out


def workload(manifests: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The manifest of a ``kind`` named ``name``."""
    return next(d for d in manifests if d.get("kind") == kind and d["metadata"]["name"] == name)


def _gpu_limit(container: Mapping[str, Any]) -> int:
    limits = (container.get("resources") or {}).get("limits") or {}
    return int(limits.get("nvidia.com/gpu", 0))


def schedulable(pod: Mapping[str, Any], node: Node) -> bool:
    """Whether the scheduler may place ``pod`` (a pod spec) on ``node``: its nodeSelector, the node's taints
    tolerated, and the node's GPUs for its ``nvidia.com/gpu`` limit."""
    if any(node.labels.get(k) != v for k, v in (pod.get("nodeSelector") or {}).items()):
        return False
    tolerated = {t.get("key") for t in pod.get("tolerations") or [] if t.get("effect") in (None, "NoSchedule")}
    if any(taint not in tolerated for taint in node.taints):
        return False
    return sum(_gpu_limit(c) for c in pod["containers"]) <= len(node.host.gpus)


def service_links(manifests: list[dict[str, Any]]) -> dict[str, str]:
    """What the kubelet injects for the namespace's Services with a cluster IP (Docker-link style variables)."""
    env: dict[str, str] = {}
    for n, svc in enumerate(d for d in manifests if d.get("kind") == "Service"):
        if svc["spec"].get("clusterIP") == "None":
            continue
        prefix, ip = svc["metadata"]["name"].upper().replace("-", "_"), f"10.96.0.{10 + n}"
        ports = svc["spec"]["ports"]
        env[f"{prefix}_SERVICE_HOST"], env[f"{prefix}_SERVICE_PORT"] = ip, str(ports[0]["port"])
        env[f"{prefix}_PORT"] = f"tcp://{ip}:{ports[0]['port']}"
        for port in ports:
            base = f"{prefix}_PORT_{port['port']}_TCP"
            env.update({base: f"tcp://{ip}:{port['port']}", f"{base}_PROTO": "tcp", f"{base}_PORT": str(port["port"]),
                        f"{base}_ADDR": ip})  # fmt: skip
    return env


def pod_container(manifests: list[dict[str, Any]], spec: Mapping[str, Any], node: Node,
                  image_env: dict[str, str]) -> Container:  # fmt: skip
    """The first container of pod ``spec`` on ``node``, as the kubelet and the device plugin make it."""
    container = spec["containers"][0]
    env = dict(image_env)
    if spec.get("enableServiceLinks", True) is not False:
        env.update(service_links(manifests))
    for source in container.get("envFrom") or []:
        ref = (source.get("configMapRef") or {}).get("name")
        if ref:
            env.update({k: str(v) for k, v in workload(manifests, "ConfigMap", ref)["data"].items()})
    for item in container.get("env") or []:
        source = item.get("valueFrom") or {}
        if "secretKeyRef" in source:
            key = source["secretKeyRef"]["key"]
            if key in SECRETS:
                env[item["name"]] = SECRETS[key]
            elif not source["secretKeyRef"].get("optional"):
                raise AssertionError(f"{item['name']}: the Secret has no {key}")
        elif "fieldRef" in source:
            env[item["name"]] = node.name if source["fieldRef"]["fieldPath"] == "spec.nodeName" else "?"
        else:
            env[item["name"]] = str(item.get("value", ""))
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    mounts = {}
    for mount in container.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        memory = (volume.get("emptyDir") or {}).get("medium") == "Memory"
        mounts[mount["mountPath"]] = "tmpfs" if memory else "volume"
    limit = _gpu_limit(container)
    gpus = node.host.gpus[:limit] if limit else node.host.gpus if env.get("NVIDIA_VISIBLE_DEVICES") == "all" else ()
    if limit:
        env["NVIDIA_VISIBLE_DEVICES"] = ",".join(g.uuid for g in gpus)  # the device plugin's allocation
    security = spec.get("securityContext") or {}
    user = (int(security.get("runAsUser", 0)), int(security.get("runAsGroup", 0)))
    argv = [*(container.get("command") or []), *(container.get("args") or [])]
    return Container(f"{spec['containers'][0]['name']}-{node.name}", env, argv, user, mounts, tuple(gpus),
                     root=Path("/nonexistent"))  # fmt: skip
