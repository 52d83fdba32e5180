"""The Kubernetes manifests under deploy/kubernetes/, checked offline (no cluster runs here).

Every document is validated against the Kubernetes OpenAPI schemas that
kubernetes-validate ships (strict: an unknown field fails), and then held to
what docs/scaling.md promises: a deny-all NetworkPolicy for the sandboxes,
gVisor, RBAC limited to pods in the sandbox namespace, the service's flags
and policy as `sbx serve` reads them, and a sandbox pod with the Docker
backend's limits. Nothing here creates a pod: the pod backend does not exist.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from sbx.agent.cli.serve import serve_command
from sbx.agent.core.config import load_config
from sbx.agent.service.server import SHUTDOWN_MARGIN_S
from sbx.sandbox.config import (
    CAPABILITIES,
    CONTAINER_USER,
    MANAGED_LABEL,
    MODE_LABEL,
    OWNER_LABEL,
    RUN_ID_LABEL,
    RUNNER_COMMAND,
    container_config,
)
from sbx.sandbox.units import parse_duration

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes"
VERSIONS = ("1.29.0", "1.33.0")
"""Oldest and newest Kubernetes minor the manifests are checked against."""


def _documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                found.append((path.name, document))
    return found


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [doc for _, doc in _documents() if doc["kind"] == kind
               and (name is None or doc["metadata"].get("name", "") == name)]
    assert len(matches) == 1, (kind, name, len(matches))
    return matches[0]


def _bytes(quantity: str) -> int:
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()
    return int(number) * 1024 ** (2 if unit == "Mi" else 3)


def test_every_manifest_is_valid_against_the_kubernetes_schemas():
    documents = _documents()
    kinds = {doc["kind"] for _, doc in documents}
    assert {"Namespace", "Deployment", "Service", "RuntimeClass", "NetworkPolicy",
            "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "PersistentVolumeClaim",
            "Pod"} <= kinds
    for version in VERSIONS:
        for name, document in documents:
            try:
                kubernetes_validate.validate(document, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{name} ({document['kind']}) on Kubernetes {version}: {exc}")


def test_the_validation_rejects_unknown_fields_and_wrong_types():
    deployment = _one("Deployment")
    typo = copy.deepcopy(deployment)
    typo["spec"]["template"]["spec"]["containers"][0]["imagePullPolicey"] = "Always"
    wrong = copy.deepcopy(deployment)
    wrong["spec"]["replicas"] = "two"
    for bad in (typo, wrong):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)


def test_sandboxes_run_under_gvisor_with_all_traffic_denied():
    policy = _one("NetworkPolicy", "sandboxes-deny-all")
    assert policy["metadata"]["namespace"] == "sbx-sandboxes"
    assert policy["spec"]["podSelector"] == {}  # every pod of the namespace
    assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]
    assert "ingress" not in policy["spec"] and "egress" not in policy["spec"]  # no allow rule
    runtime = _one("RuntimeClass")
    assert runtime["handler"] == "runsc"
    pod = _one("Pod")
    assert pod["metadata"]["namespace"] == "sbx-sandboxes"
    assert pod["spec"]["runtimeClassName"] == runtime["metadata"]["name"]
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_the_service_account_may_only_handle_pods_in_the_sandbox_namespace():
    role = _one("Role")
    assert role["metadata"]["namespace"] == "sbx-sandboxes"
    granted = {(resource, verb) for rule in role["rules"] for resource in rule["resources"]
               for verb in rule["verbs"]}
    assert {("pods", "create"), ("pods", "delete"), ("pods/attach", "create")} <= granted
    assert {resource for resource, _ in granted} == {"pods", "pods/attach"}  # no exec, secrets
    assert "*" not in {verb for _, verb in granted}
    assert not [doc for _, doc in _documents() if doc["kind"].startswith("Cluster")]
    binding = _one("RoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sbx-serve",
                                    "namespace": "sbx"}]


def test_the_deployment_runs_sbx_serve_as_it_reads_its_flags_and_policy(tmp_path):
    deployment = _one("Deployment")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert spec["serviceAccountName"] == "sbx-serve"
    assert container["command"] == ["sbx"] and container["args"][0] == "serve"
    context = serve_command.make_context("serve", list(container["args"][1:]))
    assert context.params["policy"] == Path("/etc/sbx/sbx.toml")
    grace = parse_duration(context.params["grace"])
    assert spec["terminationGracePeriodSeconds"] > grace + SHUTDOWN_MARGIN_S
    env = {item["name"]: item for item in container["env"]}
    assert env["SBX_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "sbx-database",
                                                                    "key": "url"}
    assert "value" not in env["OPENAI_API_KEY"]  # from a Secret, never inline
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    config_map = volumes[mounts["/etc/sbx"]]["configMap"]["name"]
    policy = _one("ConfigMap", config_map)["data"]["sbx.toml"]
    (tmp_path / "sbx.toml").write_text(policy)
    loaded = load_config(tmp_path / "sbx.toml")  # the real loader: no unknown key
    assert loaded.limits.runtime == "runsc" and loaded.limits.network == "none"
    service = _one("Service")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_the_sandbox_pod_keeps_the_docker_backends_limits(tmp_path):
    (tmp_path / "sbx.toml").write_text(_one("ConfigMap", "sbx-policy")["data"]["sbx.toml"])
    limits = load_config(tmp_path / "sbx.toml").limits
    docker = container_config(limits, run_id="run-0123456789ab", mode="session", owner="x")
    host = docker["host_config"]
    pod = _one("Pod")
    (container,) = pod["spec"]["containers"]
    resources = container["resources"]
    assert resources["limits"] == resources["requests"]  # Guaranteed: nothing to burst into
    assert _bytes(resources["limits"]["memory"]) == host["mem_limit"]
    assert float(resources["limits"]["cpu"]) * 1e9 == host["nano_cpus"]
    assert container["command"] == docker["command"] == RUNNER_COMMAND
    assert container["workingDir"] == docker["working_dir"]
    assert {item["name"]: item["value"] for item in container["env"]} == docker["environment"]
    context = container["securityContext"]
    assert f"{context['runAsUser']}:{context['runAsGroup']}" == CONTAINER_USER
    assert context["capabilities"] == {"drop": ["ALL"], "add": CAPABILITIES}
    assert context["readOnlyRootFilesystem"] is host["read_only"] is True
    assert context["allowPrivilegeEscalation"] is False  # no-new-privileges
    assert container["stdin"] is True and container["tty"] is False
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
    for path, size in (("/tmp", limits.tmp_size), ("/work", limits.tmp_size),
                       ("/home/user", limits.tmp_size), ("/output", limits.output_size)):
        assert path in host["tmpfs"]
        empty_dir = volumes[mounts[path]["name"]]["emptyDir"]
        assert empty_dir["medium"] == "Memory" and _bytes(empty_dir["sizeLimit"]) == size
    data = [mount for path, mount in mounts.items() if path.startswith("/data")]
    assert data and all(mount["readOnly"] for mount in data)
    assert set(pod["metadata"]["labels"]) == {MANAGED_LABEL, RUN_ID_LABEL, MODE_LABEL,
                                              OWNER_LABEL} == set(docker["labels"])
