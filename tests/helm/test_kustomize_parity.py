"""The chart and the kustomize manifests describe the same objects, so neither can drift from the other.

Each chart variant is compared with the kustomize build that offers the same thing (both on the shipped
default policy, namespace gpu-admission), object by object, after removing only what Helm adds by design:
its release labels, and, where the chart generates TLS itself (tls.mode selfSigned, the default), the two
Secrets and the webhooks' caBundle (the kustomize base leaves TLS to an overlay). The chart's self-signed
TLS and the kustomize self-signed overlay (a Job running ``certs generate``) differ on purpose
(docs/install.md).
"""

from __future__ import annotations

import copy
import shutil
from typing import Any

import pytest

from tests.deploy.conftest import MANIFESTS, _render, product_manifests
from tests.helm.conftest import Helm

HELM_LABELS = {
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "helm.sh/chart",
}

Key = tuple[str, str]


def _kustomize(name: str, body: str | None = None) -> list[dict[str, Any]]:
    """``kubectl kustomize`` of a directory of the product manifests, or of a new overlay with ``body``."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    root = product_manifests()
    if body is not None:
        (root / name).mkdir(exist_ok=True)
        (root / name / "kustomization.yaml").write_text(body, encoding="utf-8")
    return list(_render(root / name))


def _normal(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    labels = doc["metadata"].get("labels")
    if labels is not None:
        for key in HELM_LABELS:
            labels.pop(key, None)
    for webhook in doc.get("webhooks", []) if doc["kind"].endswith("WebhookConfiguration") else []:
        webhook["clientConfig"].pop("caBundle", None)
    return doc


def _by_key(docs: list[dict[str, Any]], drop_tls_secrets: bool = False) -> dict[Key, dict[str, Any]]:
    out: dict[Key, dict[str, Any]] = {}
    for doc in docs:
        if (
            drop_tls_secrets
            and doc["kind"] == "Secret"
            and doc["metadata"]["name"] in {"gpu-admission-tls", "gpu-admission-ca"}
        ):
            continue
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in out, f"two objects {key}"
        out[key] = _normal(doc)
    return out


def assert_same_objects(chart: dict[Key, dict[str, Any]], kustomize: dict[Key, dict[str, Any]]) -> None:
    assert sorted(chart) == sorted(kustomize), "the chart and kustomize render different objects"
    for key in kustomize:
        assert chart[key] == kustomize[key], f"{key[0]}/{key[1]} differs between the chart and kustomize"


def test_default_values_describe_the_kustomize_base(helm: Helm):
    chart = _by_key(helm.template({"namespace": {"create": True}}), drop_tls_secrets=True)
    assert_same_objects(chart, _by_key(_kustomize("base")))


def test_the_release_namespace_is_not_created_by_default(helm: Helm):
    assert ("Namespace", "gpu-admission") not in _by_key(helm.template())


def test_cert_manager_describes_the_cert_manager_overlay(helm: Helm):
    chart = _by_key(helm.template({"namespace": {"create": True}, "tls": {"mode": "certManager"}}))
    assert_same_objects(chart, _by_key(_kustomize("overlays/cert-manager")))


def test_in_tree_describes_the_in_tree_component(helm: Helm):
    chart = _by_key(helm.template({"namespace": {"create": True}, "inTree": {"enabled": True}}), drop_tls_secrets=True)
    body = (
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "resources: [../base]\ncomponents: [../in-tree]\n"
    )
    assert_same_objects(chart, _by_key(_kustomize("parity-in-tree", body)))


def test_audit_and_grants_describe_the_audit_and_the_grants_component(helm: Helm):
    values = {"namespace": {"create": True}, "audit": {"enabled": True}, "exceptionGrants": {"enabled": True}}
    chart = _by_key(helm.template(values), drop_tls_secrets=True)
    body = (
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../base, ../audit]\n"
        "components: [../components/exception-grants]\n"
    )
    assert_same_objects(chart, _by_key(_kustomize("parity-grants", body)))


def test_monitoring_describes_the_monitoring_manifests(helm: Helm):
    on = {
        "monitoring": {
            "serviceMonitor": {"enabled": True},
            "prometheusRule": {"enabled": True},
            "dashboard": {"enabled": True},
        }
    }
    without = set(_by_key(helm.template()))
    chart = {k: v for k, v in _by_key(helm.template(on)).items() if k not in without}
    assert_same_objects(chart, _by_key(_kustomize("monitoring")))


def test_the_charts_copies_of_the_monitoring_files_are_the_manifests(helm: Helm):
    """The dashboard is copied (Helm reads no file outside the chart); the parity above also covers it."""
    ours = (helm.chart / "files" / "dashboard.json").read_text(encoding="utf-8")
    assert ours == (MANIFESTS / "monitoring" / "dashboard.json").read_text(encoding="utf-8")


def test_parity_fails_on_a_drifted_deployment(helm: Helm):
    """Guard: the comparison sees a one-field drift (a chart that lost the read-only root filesystem)."""
    chart = _by_key(helm.template({"namespace": {"create": True}}), drop_tls_secrets=True)
    drifted = copy.deepcopy(chart)
    drifted[("Deployment", "gpu-admission")]["spec"]["template"]["spec"]["containers"][0]["securityContext"][
        "readOnlyRootFilesystem"] = False  # fmt: skip
    with pytest.raises(AssertionError, match="Deployment/gpu-admission differs"):
        assert_same_objects(drifted, _by_key(_kustomize("base")))
