"""The Kubernetes manifests (deploy/kubernetes) hold, and each rule of scripts/check_kubernetes.py bites: a copy with
one required key removed (GPU request, probe, security context, a secret as a literal) fails naming that key."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.settings import PROJECT_ROOT
from tests.scripts import script_module

MANIFESTS = PROJECT_ROOT / "deploy" / "kubernetes"
check = script_module("check_kubernetes")


def edited(tmp_path: Path, file: str, kind: str, change: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of the manifests with ``change`` applied to the first ``kind`` document of ``file``."""
    folder = tmp_path / f"k8s{len(list(tmp_path.iterdir()))}"
    shutil.copytree(MANIFESTS, folder)
    docs = list(yaml.safe_load_all((folder / file).read_text()))
    target = next(doc for doc in docs if doc and doc["kind"] == kind)
    change(target)
    (folder / file).write_text(yaml.safe_dump_all(docs))
    return folder


def container(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]["containers"][0]


def test_the_manifests_hold() -> None:
    """Every document validates against the Kubernetes 1.30 schemas and keeps the stack's rules."""
    assert check.problems(MANIFESTS, "1.30.0") == []
    kinds = {(doc["kind"], doc["metadata"]["name"]) for _, doc in check.documents(MANIFESTS)}
    for needed in [("Deployment", "vllm-engine"), ("Deployment", "vllm-router"), ("Deployment", "ui"),
                   ("Deployment", "sidecar"), ("Deployment", "locust-master"), ("Deployment", "locust-worker"),
                   ("Job", "benchmark"), ("Service", "vllm"), ("Role", "vllm-router")]:
        assert needed in kinds


def _drop(path: list[str]) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        node = doc
        for key in path[:-1]:
            node = container(node) if key == "<c>" else node[key]
        del node[path[-1]]
    return change


@pytest.mark.parametrize(
    ("file", "kind", "change", "named"),
    [
        ("engine.yaml", "Deployment", _drop(["<c>", "resources", "limits", "nvidia.com/gpu"]), "nvidia.com/gpu"),
        ("engine.yaml", "Deployment", _drop(["<c>", "readinessProbe"]), "readinessProbe"),
        ("ui.yaml", "Deployment", _drop(["<c>", "readinessProbe"]), "readinessProbe"),
        ("router.yaml", "Deployment", _drop(["<c>", "securityContext", "readOnlyRootFilesystem"]), "readOnlyRootFilesystem"),
        ("sidecar.yaml", "Deployment", _drop(["<c>", "securityContext", "allowPrivilegeEscalation"]), "allowPrivilegeEscalation"),
        ("locust.yaml", "Deployment", _drop(["<c>", "securityContext", "capabilities"]), "capabilities.drop"),
        ("benchmark-job.yaml", "Job", _drop(["spec", "template", "spec", "securityContext", "runAsNonRoot"]), "runAsNonRoot"),
        ("ui.yaml", "Deployment", _drop(["<c>", "resources", "limits", "memory"]), "limits.memory"),
    ],
)
def test_a_removed_required_key_is_named(tmp_path: Path, file: str, kind: str, change, named: str) -> None:
    found = check.problems(edited(tmp_path, file, kind, change), "1.30.0")
    assert found and all(named in line for line in found), found


WORKLOAD_FILES = [(path.name, kind) for path in sorted(MANIFESTS.glob("*.yaml")) for kind in ("Deployment", "DaemonSet", "Job")
                  if any(doc and doc["kind"] == kind for doc in yaml.safe_load_all(path.read_text()))]  # fmt: skip


@pytest.mark.parametrize(("file", "kind"), WORKLOAD_FILES)
def test_every_pod_turns_service_links_off(tmp_path: Path, file: str, kind: str) -> None:
    """Each workload keeps ``enableServiceLinks: false``: with it removed the check names it (the Service vllm would
    give the pod VLLM_PORT=tcp://..., which vLLM reads as its own port)."""
    assert len(WORKLOAD_FILES) >= 7
    found = check.problems(edited(tmp_path, file, kind, _drop(["spec", "template", "spec", "enableServiceLinks"])),
                           "1.30.0")  # fmt: skip
    assert found and all("enableServiceLinks must be false" in line for line in found), found


@pytest.mark.parametrize(("file", "kind"), [("engine.yaml", "Deployment"), ("sidecar-gpu.yaml", "DaemonSet")])
@pytest.mark.parametrize(("key", "named"), [("nodeSelector", "nvidia.com/gpu.present"), ("tolerations", "taint")])
def test_pods_on_gpus_run_on_the_gpu_nodes(tmp_path: Path, file: str, kind: str, key: str, named: str) -> None:
    """The engines (nvidia.com/gpu) and the GPU nodes' sidecars (NVIDIA_VISIBLE_DEVICES) select the GPU nodes and
    tolerate their nvidia.com/gpu taint: without either, the check names it."""
    found = check.problems(edited(tmp_path, file, kind, _drop(["spec", "template", "spec", key])), "1.30.0")
    assert found and all(key in line and named in line for line in found), found


def test_the_engine_probe_must_ask_vllms_health(tmp_path: Path) -> None:
    def change(doc: dict[str, Any]) -> None:
        container(doc)["readinessProbe"]["httpGet"]["path"] = "/"
    found = check.problems(edited(tmp_path, "engine.yaml", "Deployment", change), "1.30.0")
    assert found == ["engine.yaml: Deployment/vllm-engine: containers[vllm].readinessProbe.httpGet.path must be "
                     "/health (vLLM's), not '/'"]


def test_a_secret_as_a_literal_or_in_the_wrong_workload_is_refused(tmp_path: Path) -> None:
    def literal(doc: dict[str, Any]) -> None:
        env = container(doc)["env"]
        for item in env:
            if item["name"] == "VLLM_API_KEY":
                item.pop("valueFrom")
                item["value"] = "sk-123"
    found = check.problems(edited(tmp_path, "ui.yaml", "Deployment", literal), "1.30.0")
    assert any("env[VLLM_API_KEY] is a secret" in line for line in found), found

    def foreign(doc: dict[str, Any]) -> None:
        container(doc)["env"].append(
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "llm-serve-bench-secrets", "key": "HF_TOKEN"}}})
    found = check.problems(edited(tmp_path, "ui.yaml", "Deployment", foreign), "1.30.0")
    assert any("env[HF_TOKEN]: the ui workload must not hold this secret" in line for line in found), found


def test_the_schema_check_is_real(tmp_path: Path) -> None:
    """A misspelt key fails the strict schema validation, naming where."""
    def misspelt(doc: dict[str, Any]) -> None:
        container(doc)["readinesProbe"] = container(doc).pop("readinessProbe")
    found = check.problems(edited(tmp_path, "ui.yaml", "Deployment", misspelt), "1.30.0")
    assert any("schema" in line and "readinesProbe" in line for line in found), found


def test_kustomization_lists_every_manifest(tmp_path: Path) -> None:
    folder = tmp_path / "k8s"
    shutil.copytree(MANIFESTS, folder)
    (folder / "extra.yaml").write_text((folder / "namespace.yaml").read_text().replace("llm-serve-bench", "other"))
    assert "kustomization.yaml: resources does not list extra.yaml" in check.problems(folder, "1.30.0")
