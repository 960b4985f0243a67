"""RBAC is least privilege: every permission in the rendered manifests is listed here on purpose.

A new rule anywhere (a wildcard, a Secret permission for the webhook pods, an unnamed patch on the
webhook configurations) fails these tests until someone decides it belongs.
"""

from __future__ import annotations

from typing import Any

from tests.deploy.conftest import MUTATING, NAMESPACE, VALIDATING, render

WEBHOOK_CONFIGS = {"mutatingwebhookconfigurations": MUTATING, "validatingwebhookconfigurations": VALIDATING}


def _grants(docs: list[dict[str, Any]]) -> dict[str, set[tuple[str, str, str, str, str]]]:
    """Service account -> {(scope, apiGroup, resource, verb, resourceName or '')} through all bindings."""
    roles = {
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
    }
    out: dict[str, set[tuple[str, str, str, str, str]]] = {}
    for b in docs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        ref = b["roleRef"]
        ns = b["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
        role = roles[(ref["kind"], ns, ref["name"])]
        scope = b["metadata"].get("namespace", "cluster") if b["kind"] == "RoleBinding" else "cluster"
        for subject in b["subjects"]:
            assert subject["kind"] == "ServiceAccount" and subject["namespace"] == NAMESPACE
            grants = out.setdefault(subject["name"], set())
            for rule in role["rules"]:
                for g in rule["apiGroups"]:
                    for r in rule["resources"]:
                        for v in rule["verbs"]:
                            for n in rule.get("resourceNames") or [""]:
                                grants.add((scope, g, r, v, n))
    return out


def test_no_wildcards_and_no_escalation(rendered):
    _, docs = rendered
    for role in (d for d in docs if d["kind"] in ("Role", "ClusterRole")):
        assert "aggregationRule" not in role
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert all("*" not in value for value in rule.get(key, [])), (role["metadata"]["name"], rule)
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
            assert "nonResourceURLs" not in rule


def _scaled(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(group, resource) of every ``<resource>/scale`` the validating webhook intercepts."""
    out = set()
    for doc in docs:
        if doc["kind"] == "ValidatingWebhookConfiguration":
            for rule in doc["webhooks"][0]["rules"]:
                for r in rule["resources"]:
                    if r.endswith("/scale"):
                        out |= {(g, r.removesuffix("/scale")) for g in rule["apiGroups"]}
    return out


def test_every_scaled_kind_can_be_read(rendered):
    """A scale review is judged on the object it scales, which the server reads: without ``get`` on it
    every ``kubectl scale`` of such a kind would be denied ("could not read ... retry")."""
    _, docs = rendered
    assert {("apps", "statefulsets"), ("apps", "deployments"), ("kubeflow.org", "pytorchjobs")} <= _scaled(docs)


def test_webhook_service_account(rendered):
    _, docs = rendered
    webhook = _grants(docs)["gpu-admission"]
    # namespaces: list/watch feed the label cache; get reads one the cache does not know yet (without it
    # every namespace created after the cache synced would be denied until the watch delivers it)
    expected = {("cluster", "", "namespaces", v, "") for v in ("get", "list", "watch")}
    # nodes: the node cache (what each MIG pool's nodes advertise), read-only
    expected |= {("cluster", "", "nodes", v, "") for v in ("get", "list", "watch")}
    expected |= {  # DRA: the claim-template, claim and device-class caches (read-only)
        ("cluster", "resource.k8s.io", r, v, "")
        for r in ("resourceclaimtemplates", "resourceclaims", "deviceclasses")
        for v in ("get", "list", "watch")
    }
    expected |= {  # device capacity request policies, and NVIDIA's ComputeDomains (list/watch only)
        ("cluster", g, r, v, "")
        for g, r in (("resource.k8s.io", "resourceslices"), ("resource.nvidia.com", "computedomains"))
        for v in ("list", "watch")
    }
    expected |= {
        ("cluster", "admissionregistration.k8s.io", r, v, n)
        for r, n in WEBHOOK_CONFIGS.items()
        for v in ("get", "patch")
    }
    expected |= {("cluster", g, r, "get", "") for g, r in _scaled(docs)}  # the object a Scale scales
    assert webhook == expected
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gpu-admission"


def test_webhook_configuration_access_is_always_by_name(rendered):
    _, docs = rendered
    for sa, grants in _grants(docs).items():
        for _scope, _group, resource, verb, name in grants:
            if resource in WEBHOOK_CONFIGS:
                assert verb in ("get", "patch"), (sa, resource, verb)
                assert name == WEBHOOK_CONFIGS[resource], (sa, resource, verb, name)


def test_cert_job_service_account():
    docs = render("self-signed")
    grants = _grants(docs)
    assert set(grants) == {"gpu-admission", "gpu-admission-certs"}
    certs = grants["gpu-admission-certs"]
    expected = {
        (NAMESPACE, "", "secrets", v, n) for v in ("get", "update") for n in ("gpu-admission-tls", "gpu-admission-ca")
    }
    # create cannot be narrowed by resourceNames (the name is unknown at authorization): namespaced only
    expected.add((NAMESPACE, "", "secrets", "create", ""))
    expected |= {
        ("cluster", "admissionregistration.k8s.io", r, v, n)
        for r, n in WEBHOOK_CONFIGS.items()
        for v in ("get", "patch")
    }
    assert certs == expected
    # the CA key Secret is only reachable by the cert Job, never mounted by the webhook pods
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v} == {"gpu-admission-tls"}
