"""``manifests/audit``: the CronJob reads what the audit lists, writes only its reports, and treats
"denials found" as a successful run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import product_manifests
from webhook.audit.inventory import CONTEXT_RESOURCES

CONTEXT_PLURALS = {
    "Namespace": "namespaces",
    "Node": "nodes",
    "DeviceClass": "deviceclasses",
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "ResourceClaim": "resourceclaims",
    "ComputeDomain": "computedomains",
}


def _render() -> list[dict]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    audit = product_manifests() / "audit"  # the manifests with base/rendered.yaml from the shipped default
    proc = subprocess.run(["kubectl", "kustomize", str(audit)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _grants(docs: list[dict]) -> set[tuple[str, str, str]]:
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    (binding,) = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    subject = {"kind": "ServiceAccount", "name": "gpu-admission-audit", "namespace": "gpu-admission"}
    assert binding["subjects"] == [subject]
    assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding")]
    rules = role["rules"]
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def test_read_only_except_its_reports(policy) -> None:
    grants = _grants(_render())
    wanted = {(group, CONTEXT_PLURALS[kind]) for group, kind in CONTEXT_RESOURCES}
    for kind in policy.kinds.values():
        group, _, _ = kind.api_version.rpartition("/")
        wanted.add((group, kind.spec.plural))
    for group, resource in wanted:
        assert {(group, resource, "get"), (group, resource, "list")} <= grants, (group, resource)
    writes = {g for g in grants if g[2] not in ("get", "list")}
    assert writes == {
        ("openreports.io", r, v) for r in ("reports", "clusterreports") for v in ("create", "patch")
    }
    reports = {("openreports.io", "reports"), ("openreports.io", "clusterreports")}
    assert {(g, r) for g, r, _ in grants} - reports == wanted


def test_cronjob_applies_reports_with_the_webhooks_policy() -> None:
    docs = _render()
    (cron,) = [d for d in docs if d["kind"] == "CronJob"]
    spec = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "gpu-admission-audit"
    (container,) = spec["containers"]
    script = container["args"][0]
    assert "--apply-reports" in script and "--in-cluster" in script and "--policy /etc/gpu-admission/policy" in script
    assert container["image"] != "gpu-admission"  # set by the image component
    volumes = {v["name"]: v for v in spec["volumes"]}
    rendered = yaml.safe_load_all((product_manifests() / "base" / "rendered.yaml").read_text())
    (config,) = [d for d in rendered if d and d["kind"] == "ConfigMap"]
    assert volumes["policy"]["configMap"]["name"] == config["metadata"]["name"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"


def test_cronjob_sets_its_workers_within_its_memory_limit() -> None:
    """No CPU limit, so the default (every usable core) would be every core of the node, each worker
    with its own memory inside one limit: the CronJob names its count, and the limit holds the main
    process (≈ 100 MB for 100,000 pods) plus ≈ 30 MB per worker with room to spare."""
    (cron,) = [d for d in _render() if d["kind"] == "CronJob"]
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    words = container["args"][0].split()
    workers = int(words[words.index("--workers") + 1])
    assert workers >= 2  # the pool is what makes an hourly audit of a large cluster keep up
    limit = container["resources"]["limits"]["memory"]
    assert limit.endswith("Mi") and 100 + 30 * workers <= int(limit[:-2]) * 0.6


def test_the_exception_grants_component_gives_the_audit_the_key(tmp_path: Path) -> None:
    """Added to an overlay of ``manifests/audit``, the webhook's component mounts the same Secret into the
    CronJob's pod, points ``GPU_ADMISSION_GRANT_KEY`` at it and lets the pod's user read the 0440 file."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    manifests = product_manifests()
    (tmp_path / "audit").symlink_to(manifests / "audit")
    (tmp_path / "components").symlink_to(manifests / "components")
    (tmp_path / "image").symlink_to(manifests / "image")
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [audit]\n"
        "components: [components/exception-grants]\n"
    )
    proc = subprocess.run(["kubectl", "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert not [d for d in docs if d["kind"] == "Deployment"]
    (cron,) = [d for d in docs if d["kind"] == "CronJob"]
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "grant-key"]
    assert mount == {"name": "grant-key", "mountPath": "/etc/gpu-admission/grant-key", "readOnly": True}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GPU_ADMISSION_GRANT_KEY"] == "/etc/gpu-admission/grant-key/key"
    (volume,) = [v for v in pod["volumes"] if v["name"] == "grant-key"]
    assert volume["secret"] == {"secretName": "gpu-admission-grant-key", "defaultMode": 0o440}
    user = pod["securityContext"]
    assert user["fsGroup"] == user["runAsGroup"] == 10001  # the kubelet makes the 0440 file the group's


@pytest.mark.parametrize(("audit_exit", "job_exit"), [(0, 0), (1, 0), (2, 2)])
def test_denials_found_is_a_successful_job(tmp_path: Path, audit_exit: int, job_exit: int) -> None:
    (cron,) = [d for d in _render() if d["kind"] == "CronJob"]
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    stub = tmp_path / "gpu-admission"
    stub.write_text(f"#!/bin/sh\nexit {audit_exit}\n")
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "POD_NAMESPACE": "gpu-admission"}
    proc = subprocess.run([*container["command"], container["args"][0]], env=env, timeout=30)
    assert proc.returncode == job_exit
