"""deploy/k8s/ against the Kubernetes API schemas (kubernetes-validate, offline, strict) for a pinned version, and
what docs/deploy.md promises of them: probes on what each image serves, requests, hardened pods, secrets by
reference, a PodDisruptionBudget per Deployment, a grace period above the shutdown grace."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
KUBERNETES_VERSION = "1.33"
"""The Kubernetes version the manifests are validated for (a current release line; bump with the schemas)."""
SECRET_VARS = {"REDIS_URL", "REDIS_PASSWORD", "NATS_PASSWORD", "A2AMESH_API_KEYS"}
PROBE = ["python", "/app/probe.py"]


def documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in documents() if doc["kind"] == kind]


def dockerfile_healthcheck(service: str) -> list[str]:
    """The exec form of a service image's HEALTHCHECK CMD."""
    text = (REPO / "services" / "Dockerfile").read_text()
    target = re.search(rf"^FROM runtime AS {service}$(.*?)(?=^FROM |\Z)", text, re.MULTILINE | re.DOTALL)
    assert target, f"services/Dockerfile has no target {service}"
    match = re.search(r"^HEALTHCHECK .*? CMD (\[.*\])$", target.group(1), re.MULTILINE)
    assert match, f"services/Dockerfile's target {service} has no HEALTHCHECK in exec form"
    command: list[str] = yaml.safe_load(match.group(1))
    return command


@pytest.mark.parametrize(("file", "doc"), documents(), ids=lambda v: v if isinstance(v, str) else v["kind"])
def test_manifest_validates_against_the_kubernetes_schema(file: str, doc: dict[str, Any]) -> None:
    """Guards against fields Kubernetes would reject or silently drop (strict: unknown fields are errors)."""
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validator_rejects_a_broken_deployment() -> None:
    """Guards against a validation that passes anything (a schema not found, a lenient mode)."""
    broken = copy.deepcopy(of_kind("Deployment")[0])
    broken["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="resource"):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_deployments_are_hardened_probed_and_covered_by_a_disruption_budget() -> None:
    """Guards against a pod running as root or writable, without requests, with a secret in plain text, without
    a probe on what its image serves, a grace period Kubernetes cuts short, or no PodDisruptionBudget."""
    (config,) = [c["data"] for c in of_kind("ConfigMap") if c["metadata"]["name"] == "a2amesh"]
    grace = float(config["A2AMESH_SHUTDOWN_GRACE"])
    budgets = [pdb["spec"]["selector"]["matchLabels"] for pdb in of_kind("PodDisruptionBudget")]
    deployments = {d["metadata"]["name"]: d for d in of_kind("Deployment")}
    assert set(deployments) == {
        "a2amesh-executor",
        "a2amesh-gateway",
        "a2amesh-remotes",
        "a2amesh-llm-host",
        "order-validator",
        "weather",
    }
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
        assert any(b.items() <= labels.items() for b in budgets), f"{name} has no PodDisruptionBudget"
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] == 10001, name
        assert pod["automountServiceAccountToken"] is False, name
        assert pod["terminationGracePeriodSeconds"] > grace, name
        (container,) = pod["containers"]
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True, name
        assert security["allowPrivilegeEscalation"] is False, name
        assert security["capabilities"]["drop"] == ["ALL"], name
        assert {"cpu", "memory"} <= container["resources"]["requests"].keys(), name
        for var in container.get("env", []):
            if var["name"] in SECRET_VARS:
                assert "secretKeyRef" in var.get("valueFrom", {}), f"{name}: {var['name']} is not from a Secret"
        assert container["envFrom"] == [{"configMapRef": {"name": "a2amesh"}}], name
        image = container["image"].split(":")[0]
        if image == "a2amesh-gateway":
            assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
            assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        else:
            # agents, executors and remote proxies serve no HTTP: the same check as their image's HEALTHCHECK
            service = image.removeprefix("a2amesh-")
            assert container["readinessProbe"]["exec"]["command"] == PROBE == dockerfile_healthcheck(service), name
            assert "livenessProbe" not in container, f"{name}: a NATS outage would restart every pod"


def test_the_gateway_service_reaches_the_gateway_pods() -> None:
    """Guards against a Service whose selector or target port matches no gateway container."""
    (service,) = of_kind("Service")
    gateway = next(d for d in of_kind("Deployment") if d["metadata"]["name"] == "a2amesh-gateway")
    pod = gateway["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    ports = {p["name"] for c in pod["spec"]["containers"] for p in c["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports


def test_each_pod_reads_only_its_own_secret_as_deploy_init_writes_it(tmp_path: Path) -> None:
    """Guards against a pod given another process's credentials, or a reference to a Secret or key that
    `a2amesh deploy init --kubernetes` does not write."""
    from a2amesh.provision import KUBERNETES, DeployInit, kubernetes_name

    DeployInit(
        tmp_path, "a2amesh", ["order_validator", "weather"], kubernetes=True, owner=(os.getuid(), os.getgid())
    ).run()
    written = {
        d["metadata"]["name"]: set(d["stringData"]) for d in yaml.safe_load_all((tmp_path / KUBERNETES).read_text())
    }
    for deployment in of_kind("Deployment"):
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        env = {v["name"]: v for v in container["env"]}
        user = env["NATS_USER"]["value"]
        assert env["REDIS_USER"]["value"] == user
        refs = [v["valueFrom"]["secretKeyRef"] for v in env.values() if "secretKeyRef" in v.get("valueFrom", {})]
        assert {r["name"] for r in refs} == {kubernetes_name(user)}, deployment["metadata"]["name"]
        for ref in refs:
            assert ref["key"] in written[ref["name"]], ref


def test_the_stored_remotes_run_as_their_own_user() -> None:
    """Guards against the proxies of the remotes declared through the API left out of the cluster, run as a file
    proxy (which wants REMOTE_FILE), or signed in as another process's user rather than deploy init's remotes."""
    from a2amesh.access import REMOTES

    (deployment,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "a2amesh-remotes"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"].split(":")[0] == "a2amesh-remote"
    assert container["command"][-1] == "--stored", container["command"]
    env = {v["name"]: v for v in container["env"]}
    assert env["NATS_USER"]["value"] == env["REDIS_USER"]["value"] == REMOTES
    assert "volumeMounts" not in container, "it reads its declarations from Valkey, not from a file"


def test_the_llm_host_runs_as_its_own_user() -> None:
    """Guards against the host of the LLM agents stored through the API left out of the cluster, started as
    something else than ``a2amesh llm-host``, or signed in as another process's user rather than deploy init's
    llm-host."""
    from a2amesh.access import LLM_HOST

    (deployment,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "a2amesh-llm-host"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["a2amesh", "llm-host"], container["command"]
    env = {v["name"]: v for v in container["env"]}
    assert env["NATS_USER"]["value"] == env["REDIS_USER"]["value"] == LLM_HOST
