"""The Helm chart under real Helm 4: it lints strictly, every documented variant renders objects that are
schema-valid for Kubernetes 1.30 and 1.36, the values schema refuses wrong values with their path, and the
chart never installs webhooks that do not follow the policy it mounts.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import kubernetes_validate
import pytest
from cryptography import x509

from tests.helm.conftest import NAMESPACE, Helm

K8S_VERSIONS = ("1.30.0", "1.36.0")

# Every variant docs/install.md documents, as the values a platform engineer writes.
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "cert-manager": {"tls": {"mode": "certManager"}},
    "cert-manager-issuer": {"tls": {"mode": "certManager", "certManager": {
        "issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}}}},
    "self-signed": {"tls": {"mode": "selfSigned", "selfSigned": {"ipAddresses": ["127.0.0.1"]}}},
    "external": {"tls": {"mode": "external", "external": {"caBundle": "Y2E="}}},
    "url": {"webhook": {"clientConfig": {"mode": "url", "url": "https://127.0.0.1:8443"}},
            "tls": {"mode": "external", "external": {"caBundle": "Y2E="}}},
    "external-webhook": {"webhook": {"deploy": False, "clientConfig": {"mode": "url", "url": "https://10.0.0.9:8443"}},
                         "tls": {"mode": "external", "external": {"caBundle": "Y2E="}}},
    "existing-policy-configmap": {"policy": {"existingConfigMap": "platform-gpu-policy"}},
    "in-tree": {"inTree": {"enabled": True}},
    "in-tree-fail-closed": {"inTree": {"enabled": True, "availability": "webhook"}},
    "in-tree-mutating": {"inTree": {"enabled": True, "mutating": True}},
    "audit": {"audit": {"enabled": True}},
    "monitoring": {"monitoring": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True},
                                  "dashboard": {"enabled": True}}},
    "grants": {"exceptionGrants": {"enabled": True}, "audit": {"enabled": True}},
    "namespace": {"namespace": {"create": True}, "networkPolicy": {"controlPlaneCIDRs": ["10.0.0.0/24"]}},
}  # fmt: skip

# kinds kubernetes-validate has no schema for (CRDs), per variant; any other skip fails
CRD_KINDS = {
    "cert-manager": {"Certificate", "Issuer"},
    "cert-manager-issuer": {"Certificate"},
    "monitoring": {"ServiceMonitor", "PrometheusRule"},
}


def kinds(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        out.setdefault(doc["kind"], []).append(doc)
    return out


def webhooks(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [w for d in docs if d["kind"].endswith("WebhookConfiguration") for w in d["webhooks"]]


def test_lint_strict(helm: Helm):
    proc = helm.run("lint", "--strict", str(helm.chart), "--namespace", NAMESPACE)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_lint_strict_variant(helm: Helm, variant: str, tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(json.dumps(VARIANTS[variant]), encoding="utf-8")
    proc = helm.run("lint", "--strict", str(helm.chart), "--namespace", NAMESPACE, "-f", str(values))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_is_schema_valid(helm: Helm, variant: str, version: str):
    docs = helm.template(VARIANTS[variant])
    skipped: set[str] = set()
    for doc in docs:
        if version == "1.30.0" and doc["kind"].startswith("MutatingAdmissionPolicy"):
            continue  # served from 1.36 (inTree.mutating says where)
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            skipped.add(doc["kind"])
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{variant}: {doc['kind']}/{doc['metadata']['name']} invalid for {version}: {exc}")
    assert skipped == CRD_KINDS.get(variant, set())


def test_strict_validation_is_live(helm: Helm):
    (dep,) = kinds(helm.template())["Deployment"]
    dep = copy.deepcopy(dep)
    dep["spec"]["template"]["spec"]["containers"][0]["readOnlyRootFileSystem"] = True  # typo'd key
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, "1.30.0", strict=True)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"webhook": {"replicas": 0}}, "webhook.replicas"),
        ({"tls": {"mode": "letsencrypt"}}, "tls.mode"),
        ({"webhook": {"replicaCount": 3}}, "replicaCount"),
        ({"webhook": {"clientConfig": {"mode": "url"}}}, "webhook.clientConfig"),
        ({"webhook": {"clientConfig": {"mode": "url", "url": "http://10.0.0.1:8443"}}}, "webhook.clientConfig.url"),
        ({"tls": {"mode": "external"}}, "tls"),
        ({"inTree": {"mutating": "yes"}}, "inTree.mutating"),
        ({"webhook": {"deploy": False}}, "webhook.clientConfig.mode"),
        ({"networkPolicy": {"controlPlaneCIDRs": ["10.0.0.0"]}}, "networkPolicy.controlPlaneCIDRs"),
    ],
)
def test_a_wrong_value_is_refused_by_the_schema_with_its_path(helm: Helm, values, message):
    proc = helm.template_proc(values)
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    assert message.replace(".", "/") in proc.stderr or message in proc.stderr, proc.stderr


# --- the webhooks follow the policy the chart mounts -----------------------------------------------


def _bundle_values(helm: Helm) -> dict[str, Any]:
    return {"policy": {"bundle": json.loads((helm.chart / "files" / "policy-bundle.json").read_text())}}


def test_a_policy_edited_in_values_without_a_re_render_is_refused(helm: Helm):
    """Attack: a policy that adds a GPU resource name, shipped with the webhook configurations rendered from
    the old policy, would let pods with that resource skip the webhooks' matchConditions entirely."""
    values = _bundle_values(helm)
    files = values["policy"]["bundle"]["files"]
    name = sorted(files)[0]
    files[name] = files[name].replace("nvidia.com/gpu", "nvidia.com/gpu-new", 1)
    proc = helm.template_proc(values)
    assert proc.returncode != 0
    assert "is not the policy its objects were rendered from" in proc.stderr, proc.stderr


def test_a_rendered_values_bundle_installs_the_same_objects_as_the_charts_own(helm: Helm):
    external = VARIANTS["external"]  # generated certificates differ from render to render
    assert helm.template(_bundle_values(helm) | external) == helm.template(external)


def test_a_bundle_that_is_not_one_is_refused_by_the_schema(helm: Helm):
    proc = helm.template_proc({"policy": {"bundle": {"objects": []}}})
    assert proc.returncode != 0
    assert "at '/policy/bundle'" in proc.stderr and "missing properties 'format'" in proc.stderr, proc.stderr


def test_the_policy_configmap_carries_the_bundles_files(helm: Helm):
    bundle = json.loads((helm.chart / "files" / "policy-bundle.json").read_text())
    (cm,) = [d for d in helm.template() if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "gpu-admission-policy"]
    assert cm["data"] == bundle["files"]


def test_an_existing_policy_configmap_is_mounted_and_none_created(helm: Helm):
    docs = helm.template(VARIANTS["existing-policy-configmap"])
    assert not [d for d in docs if d["kind"] == "ConfigMap"]
    (dep,) = kinds(docs)["Deployment"]
    (vol,) = [v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "policy"]
    assert vol["configMap"]["name"] == "platform-gpu-policy"


def test_fail_open_only_with_the_in_tree_policies_installed(helm: Helm):
    """Attack: an outage of a fail-open validating webhook admits everything unless the in-tree policies hold."""
    alone = helm.template({"inTree": {"enabled": False, "availability": "in-tree"}})
    (validating,) = kinds(alone)["ValidatingWebhookConfiguration"]
    assert {w["failurePolicy"] for w in validating["webhooks"]} == {"Fail"}
    assert validating["metadata"]["annotations"]["gpu-admission.io/availability"] == "webhook"
    assert not [d for d in alone if d["kind"].startswith("ValidatingAdmissionPolicy")
                and d["metadata"]["labels"].get("gpu-admission.io/in-tree") == "true"]  # fmt: skip
    with_policies = helm.template(VARIANTS["in-tree"])
    (validating,) = kinds(with_policies)["ValidatingWebhookConfiguration"]
    assert {w["failurePolicy"] for w in validating["webhooks"]} == {"Ignore"}
    in_tree = [d for d in with_policies if d["metadata"].get("labels", {}).get("gpu-admission.io/in-tree") == "true"]
    assert {d["kind"] for d in in_tree} == {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    closed = helm.template(VARIANTS["in-tree-fail-closed"])
    (validating,) = kinds(closed)["ValidatingWebhookConfiguration"]
    assert {w["failurePolicy"] for w in validating["webhooks"]} == {"Fail"}


def test_mutating_admission_policies_only_where_the_cluster_serves_them(helm: Helm):
    def maps(docs):
        return {d["metadata"]["name"] for d in docs if d["kind"] == "MutatingAdmissionPolicy"}

    assert not maps(helm.template(VARIANTS["in-tree"]))
    served = helm.template(
        VARIANTS["in-tree"], "--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
    )
    assert maps(served) and maps(served) == maps(helm.template(VARIANTS["in-tree-mutating"]))
    assert not maps(helm.template({"inTree": {"enabled": True, "mutating": False}}, "--api-versions",
                                  "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"))  # fmt: skip


# --- TLS and clientConfig ---------------------------------------------------------------------------


def test_self_signed_serving_certificate_is_signed_by_the_ca_bundle(helm: Helm):
    docs = helm.template(VARIANTS["self-signed"])
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    tls = secrets["gpu-admission-tls"]["data"]
    ca_b64 = secrets["gpu-admission-ca"]["data"]["ca.crt"]
    assert tls["ca.crt"] == ca_b64
    assert {w["clientConfig"]["caBundle"] for w in webhooks(docs)} == {ca_b64}
    ca = x509.load_pem_x509_certificate(base64.b64decode(ca_b64))
    leaf = x509.load_pem_x509_certificate(base64.b64decode(tls["tls.crt"]))
    leaf.verify_directly_issued_by(ca)
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"gpu-admission.{NAMESPACE}.svc" in san.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    not_after = int(secrets["gpu-admission-tls"]["metadata"]["annotations"]["gpu-admission.io/not-after"])
    assert abs(not_after - leaf.not_valid_after_utc.timestamp()) < 86400 * 2


def test_cert_manager_injects_the_ca_and_the_chart_sets_none(helm: Helm):
    docs = helm.template(VARIANTS["cert-manager"])
    assert not [d for d in docs if d["kind"] == "Secret"]
    for config in (d for d in docs if d["kind"].endswith("WebhookConfiguration")):
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/gpu-admission-tls"
    assert all("caBundle" not in w["clientConfig"] for w in webhooks(docs))


def test_url_client_config_with_the_given_ca_bundle(helm: Helm):
    docs = helm.template(VARIANTS["url"])
    got = {w["name"]: w["clientConfig"] for w in webhooks(docs)}
    assert got == {
        "mutate.gpu-admission.io": {"url": "https://127.0.0.1:8443/mutate", "caBundle": "Y2E="},
        "validate.gpu-admission.io": {"url": "https://127.0.0.1:8443/validate", "caBundle": "Y2E="},
    }


def test_an_external_webhook_installs_no_workload(helm: Helm):
    docs = kinds(helm.template(VARIANTS["external-webhook"]))
    assert not {"Deployment", "Service", "PodDisruptionBudget", "ResourceQuota", "NetworkPolicy"} & set(docs)
    assert {"ConfigMap", "ClusterRole", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} <= set(docs)


def test_the_release_namespace_reaches_every_namespaced_reference(helm: Helm):
    proc = helm.run("template", "gpu-admission", str(helm.chart), "--namespace", "platform-gpu")
    assert proc.returncode == 0, proc.stderr
    assert "@@RELEASE_NAMESPACE@@" not in proc.stdout
    assert "namespace: gpu-admission\n" not in proc.stdout
    assert "- gpu-admission\n" not in proc.stdout  # the webhooks' namespaceSelector exempts platform-gpu instead
