"""``audit`` and ``certs inject`` against the real API, with the identities the manifests ship.

- ``audit --kubeconfig`` runs with a token of ``manifests/audit``'s ServiceAccount, so its RBAC is what
  lets it list every kind; pages of 5 objects make it follow ``continue`` tokens for real; a namespace
  whose entitlement label the platform team changed after its pods were admitted shows up as denials.
- ``--apply-reports`` writes OpenReports ``Report`` objects by server-side apply into a CRD installed from
  the schema the unit tier checks reports against (``tests/audit/openreports_schema.py``): what the
  apiserver stores must be what the audit sent (nothing pruned).
- ``certs inject`` patches the live webhook configurations' ``caBundle`` (keeping the previous CA
  during a rotation) and the apiserver goes on calling the webhook.
- The shipped ServiceAccounts may do what their servers need and nothing more (``kubectl auth can-i``).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.audit.openreports_schema import schema
from tests.conftest import DEFAULT_POLICY_DIR, ROOT
from tests.e2e import install
from tests.e2e.conftest import Product, probe_mutated

AUDIT_MANIFESTS = ROOT / "manifests" / "audit"


def structural(s: Any) -> Any:
    """A JSON Schema of the unit tier made a CRD's structural schema (no const, no additionalProperties: false)."""
    if isinstance(s, dict):
        out = {k: structural(v) for k, v in s.items() if k not in ("additionalProperties", "const")}
        if "const" in s:
            out["type"] = "string"
            out["enum"] = [s["const"]]
        if s.get("additionalProperties") not in (None, False):
            out["additionalProperties"] = structural(s["additionalProperties"])
        if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
            out["x-kubernetes-preserve-unknown-fields"] = True
        return out
    if isinstance(s, list):
        return [structural(v) for v in s]
    return s


def report_crds() -> list[dict[str, Any]]:
    out = []
    for kind, plural, scope in (("Report", "reports", "Namespaced"), ("ClusterReport", "clusterreports", "Cluster")):
        body = structural(schema(kind))
        body["properties"]["metadata"] = {"type": "object"}
        out.append({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.openreports.io"},
            "spec": {"group": "openreports.io", "scope": scope,
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                     "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": body}}]},
        })  # fmt: skip
    return out


@pytest.fixture(scope="module")
def audit_kubeconfig(product: Product) -> Path:
    plane = product.plane
    for name in ("rbac.yaml",):
        install.apply(plane, install.load_yaml(AUDIT_MANIFESTS / name))
    install.apply(plane, report_crds())
    install.wait_for(lambda: plane.kubectl("get", "reports.openreports.io", "-A", check=False).returncode == 0,
                     "the OpenReports CRD to be served")  # fmt: skip
    sa = next(d for d in install.load_yaml(AUDIT_MANIFESTS / "rbac.yaml") if d["kind"] == "ServiceAccount")
    token = install.sa_token(plane, sa["metadata"]["namespace"], sa["metadata"]["name"])
    return plane.token_kubeconfig(token, "gpu-admission-audit")


def audit(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", "audit", "--policy", str(DEFAULT_POLICY_DIR), "--kubeconfig", str(kubeconfig),
         "--workers", "1", *args],
        capture_output=True, text=True, cwd=ROOT, check=False, timeout=300,
    )  # fmt: skip


def raw_pod(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"raw-{i}"},
            "spec": {"containers": [{"name": "c", "image": "registry.example/app:1",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}  # fmt: skip


def training_pod(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"train-{i}", "labels": {"gpu-admission.io/workload": "training"}},
            "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}}  # fmt: skip


@pytest.fixture(scope="module")
def audited_ns(product: Product) -> Iterator[tuple[str, int, int]]:
    """A namespace with raw GPU pods (warned) and training pods, then relabelled serving-only."""
    plane = product.plane
    ns = install.namespace(plane, prefix="audit")
    raws, trains = 9, 4
    install.apply(plane, [{**raw_pod(i), "metadata": {**raw_pod(i)["metadata"], "namespace": ns}} for i in range(raws)])
    install.apply(plane, [{**training_pod(i), "metadata": {**training_pod(i)["metadata"], "namespace": ns}}
                          for i in range(trains)])  # fmt: skip
    # the platform team makes it a serving-only namespace: the training pods it already runs break the policy now
    plane.kubectl("label", "namespace", ns, "gpu-admission.io/tier=serving")
    try:
        yield ns, raws, trains
    finally:  # bound pods hold their nodes' GPUs until deleted (no kubelet ends them)
        plane.kubectl("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force")


def test_audit_with_its_own_rbac_pages_through_and_finds_the_relabelled_namespace(
    audit_kubeconfig: Path, audited_ns: tuple[str, int, int]
) -> None:
    ns, _, trains = audited_ns
    proc = audit(audit_kubeconfig, "--namespace", ns, "--page-size", "5", "-o", "json")
    assert proc.returncode == 1, proc.stderr  # denials found
    report = json.loads(proc.stdout)
    text = json.dumps(report)
    for i in range(trains):
        assert f"train-{i}" in text
    denied = [o for o in report.get("objects", report.get("results", [])) if o.get("status") == "denied"
              or o.get("allowed") is False]  # fmt: skip
    assert len(denied) >= trains, json.dumps(report)[:2000]
    assert "class-not-allowed" in text


def test_apply_reports_stores_what_the_audit_sent(product: Product, audit_kubeconfig: Path,
                                                  audited_ns: tuple[str, int, int]) -> None:  # fmt: skip
    ns, _, trains = audited_ns
    sent = audit(audit_kubeconfig, "--namespace", ns, "-o", "openreports", "--date", "2026-12-04")
    assert sent.returncode in (0, 1), sent.stderr
    applied = audit(audit_kubeconfig, "--namespace", ns, "--apply-reports", "--date", "2026-12-04")
    assert applied.returncode in (0, 1), applied.stderr
    stored = json.loads(product.plane.kubectl("get", "reports.openreports.io", "-n", ns, "-o", "json").stdout)
    assert len(stored["items"]) == 1, stored
    report = stored["items"][0]
    ours = [d for d in yaml.safe_load_all(sent.stdout) if d and d.get("kind") == "Report"]
    assert len(ours) == 1
    assert report["summary"] == ours[0]["summary"]
    assert report["summary"]["fail"] >= trains
    assert len(report.get("results") or []) == len(ours[0].get("results") or [])
    for got, want in zip(report["results"], ours[0]["results"], strict=True):
        assert {k: got.get(k) for k in want if k != "timestamp"} == {k: v for k, v in want.items() if k != "timestamp"}


def test_the_audit_may_not_write_workloads(product: Product, audit_kubeconfig: Path) -> None:
    plane = product.plane
    can = plane.kubectl("auth", "can-i", "list", "pods", "-A", kubeconfig=audit_kubeconfig, check=False)
    assert can.stdout.strip() == "yes"
    for verb, what in (("create", "pods"), ("delete", "pods"), ("get", "secrets"), ("patch", "namespaces")):
        out = plane.kubectl("auth", "can-i", verb, what, "-A", kubeconfig=audit_kubeconfig, check=False).stdout.strip()
        assert out == "no", f"the audit's ServiceAccount may {verb} {what}"


def test_the_webhook_service_account_reads_only_what_it_needs(product: Product) -> None:
    plane = product.plane
    kc = plane.directory / "users" / "gpu-admission-sa.kubeconfig"
    for verb, what in (("watch", "namespaces"), ("list", "nodes"), ("watch", "resourceclaimtemplates.resource.k8s.io")):
        assert plane.kubectl("auth", "can-i", verb, what, kubeconfig=kc, check=False).stdout.strip() == "yes", what
    for verb, what in (("list", "pods"), ("get", "secrets"), ("create", "pods"),
                       ("patch", "validatingwebhookconfigurations/other")):  # fmt: skip
        assert plane.kubectl("auth", "can-i", verb, what, kubeconfig=kc, check=False).stdout.strip() == "no", what


def test_certs_inject_rotates_the_ca_bundle_on_the_live_configurations(product: Product, tmp_path: Path) -> None:
    plane = product.plane
    new = tmp_path / "new"
    install.make_certs(new)
    before = install.get(plane, "validatingwebhookconfiguration", "gpu-admission-validating")
    old_bundle = base64.b64decode(before["webhooks"][0]["clientConfig"]["caBundle"])
    kubeconfig = plane.admin_kubeconfig
    proc = subprocess.run(
        [sys.executable, "-m", "webhook", "certs", "inject", "--ca", str(new / "ca.crt"), "--keep-previous",
         "--mutating", "gpu-admission-mutating", "--validating", "gpu-admission-validating",
         "--kubeconfig", str(kubeconfig)],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for kind, name in (("mutatingwebhookconfiguration", "gpu-admission-mutating"),
                       ("validatingwebhookconfiguration", "gpu-admission-validating")):  # fmt: skip
        cfg = install.get(plane, kind, name)
        for hook in cfg["webhooks"]:
            bundle = base64.b64decode(hook["clientConfig"]["caBundle"])
            assert (new / "ca.crt").read_bytes().strip() in bundle
            assert old_bundle.strip() in bundle  # the previous CA kept during the rotation
            assert hook["clientConfig"]["url"].startswith("https://127.0.0.1:")  # nothing else touched
    # the old serving certificate still verifies against the bundle: the webhook is still called
    assert install.wait_for(lambda: probe_mutated(plane), "the webhook to keep answering after the rotation")
