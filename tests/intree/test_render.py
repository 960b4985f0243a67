"""The rendered in-tree policies: valid for the API, self-contained, labelled, one binding per action.

Schema: every object validates strictly (unknown fields fail) against the Kubernetes 1.37 OpenAPI
schema (kubernetes-validate), the ValidatingAdmissionPolicies against 1.30 as well (GA there).
"""

from __future__ import annotations

import subprocess

import kubernetes_validate
import pytest
import yaml

from tests.conftest import POLICIES, ROOT
from tests.deploy.cel_match import unguarded_has
from tests.deploy.conftest import product_manifests, render_in_tree
from tests.intree.conftest import NAMES, in_tree, policy_named
from webhook.cli import main
from webhook.engine.rules.registry import RULES
from webhook.render.intree.cel import RESOLUTION_RULES
from webhook.render.intree.explain import WHY, table
from webhook.render.intree.vap import IN_TREE_LABEL

VAP, BINDING = "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"


def expressions(obj: dict) -> list[str]:
    spec = obj.get("spec") or {}
    out = [c["expression"] for c in spec.get("matchConditions", [])]
    out += [v["expression"] for v in spec.get("variables", [])]
    out += [v["expression"] for v in spec.get("validations", [])]
    out += [
        m[k]["expression"] for m in spec.get("mutations", []) for k in ("jsonPatch", "applyConfiguration") if k in m
    ]
    return out


@pytest.mark.parametrize("name", NAMES)
def test_objects_are_schema_valid_for_1_37(name):
    objects = in_tree(name, (1, 37))
    assert {o["kind"] for o in objects} >= {VAP, BINDING}
    for obj in objects:
        kubernetes_validate.validate(obj, "1.37.0", strict=True)
        if obj["kind"] in (VAP, BINDING):
            kubernetes_validate.validate(obj, "1.30.0", strict=True)


def test_strict_schema_validation_is_live():
    obj = dict(in_tree("default")[0])
    obj["spec"] = {**obj["spec"], "paramKnd": {"kind": "ConfigMap"}}  # a typo'd field
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, "1.37.0", strict=True)


@pytest.mark.parametrize("name", NAMES)
def test_self_contained_labelled_fail_closed_and_messages_name_the_rule(name):
    objects = in_tree(name)
    for obj in objects:
        assert obj["metadata"]["labels"][IN_TREE_LABEL] == "true"
    policies = [o for o in objects if o["kind"] == VAP]
    for p in policies:
        assert "paramKind" not in p["spec"] and p["spec"]["failurePolicy"] == "Fail"
        for v in p["spec"]["validations"]:
            rule = v["message"].removeprefix("[").split("]", 1)[0]
            assert rule in RULES and v["message"].startswith(f"[{rule}] "), v["message"]
            assert "\n" not in v["message"]
    bindings = {o["metadata"]["name"]: o for o in objects if o["kind"] == BINDING}
    for p in policies:
        b = bindings[p["metadata"]["name"]]
        assert "paramRef" not in b["spec"] and b["spec"]["policyName"] == p["metadata"]["name"]
        action = p["metadata"]["name"].rsplit("-", 1)[1]
        assert b["spec"]["validationActions"] == [{"deny": "Deny", "warn": "Warn", "audit": "Audit"}[action]]


def test_each_action_gets_its_binding():
    """The variant sets warn per namespace, audit per class, warn per class: three policies, three bindings."""
    names = sorted(o["metadata"]["name"] for o in in_tree("variant") if o["kind"] == VAP)
    assert names == ["gpu-admission-in-tree-audit", "gpu-admission-in-tree-deny", "gpu-admission-in-tree-warn"]
    by_name = {o["metadata"]["name"]: o for o in in_tree("variant") if o["kind"] == VAP}
    warn = [v["message"] for v in by_name["gpu-admission-in-tree-warn"]["spec"]["validations"]]
    assert any(m.startswith("[node-name-set]") for m in warn) and any(m.startswith("[placement-missing]") for m in warn)
    audit = [v["message"] for v in by_name["gpu-admission-in-tree-audit"]["spec"]["validations"]]
    assert all(m.startswith("[privileged-gpu]") for m in audit) and audit


@pytest.mark.parametrize("name", NAMES)
def test_every_nested_has_is_guarded(name):
    for obj in in_tree(name, (1, 36)):
        for expression in expressions(obj):
            assert unguarded_has(expression) == [], expression[:300]


def test_render_in_tree_prints_the_in_tree_objects(capsys):
    assert main(["policy", "render", "--in-tree", str(POLICIES)]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert docs == list(in_tree("default"))


def test_default_render_is_unchanged_by_in_tree_and_says_its_mode(capsys):
    """Existing installs are never changed silently: the in-tree objects are only in --in-tree output, and
    the webhook configurations carry their availability mode."""
    assert main(["policy", "render", str(POLICIES)]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert not any(IN_TREE_LABEL in (d["metadata"].get("labels") or {}) for d in docs)
    hooks = {d["kind"]: d for d in docs if d["kind"].endswith("WebhookConfiguration")}
    assert {h["metadata"]["annotations"]["gpu-admission.io/availability"] for h in hooks.values()} == {"webhook"}
    assert hooks["ValidatingWebhookConfiguration"]["webhooks"][0]["failurePolicy"] == "Fail"
    assert main(["policy", "render", "--availability", "in-tree", str(POLICIES)]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    hooks = {d["kind"]: d for d in docs if d["kind"].endswith("WebhookConfiguration")}
    assert hooks["ValidatingWebhookConfiguration"]["webhooks"][0]["failurePolicy"] == "Ignore"
    assert hooks["MutatingWebhookConfiguration"]["webhooks"][0]["failurePolicy"] == "Ignore"
    assert {h["metadata"]["annotations"]["gpu-admission.io/availability"] for h in hooks.values()} == {"in-tree"}


def test_the_kustomize_component_adds_the_policies_and_switches_the_mode(tmp_path):
    kubectl = pytest.importorskip("shutil").which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    overlay = product_manifests() / ".test-in-tree-overlay"
    overlay.mkdir(exist_ok=True)
    try:
        (overlay / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
            "resources: [../base]\ncomponents: [../in-tree]\n"
        )
        out = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=60)
    finally:
        (overlay / "kustomization.yaml").unlink(missing_ok=True)
        overlay.rmdir()
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    policies = [d for d in docs if d["kind"] == VAP and IN_TREE_LABEL in d["metadata"]["labels"]]
    assert policies and all("namespace" not in d["metadata"] for d in policies)
    (validating,) = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    assert validating["webhooks"][0]["failurePolicy"] == "Ignore"
    assert validating["metadata"]["annotations"]["gpu-admission.io/availability"] == "in-tree"


def test_explain_covers_every_rule_and_the_docs_carry_the_table(capsys):
    assert set(WHY) == set(RULES), "every rule says what holds while the webhook is down"
    assert main(["policy", "render", "--explain", str(POLICIES)]) == 0
    out = capsys.readouterr().out
    for rule_id in RULES:
        assert f"{rule_id} [" in out
    assert "placement-missing [partly" in out and "claim-unresolved [webhook only" in out
    docs = (ROOT / "docs" / "policy.md").read_text()
    assert table(None, markdown=True) in docs, "docs/policy.md: paste the table from webhook.render.intree.explain"


def test_resolution_rules_are_every_rule_a_failed_resolution_reports():
    """placement-missing and the class maximum rely on it: a failed resolution must deny for them to hold."""
    import re

    source = (ROOT / "webhook" / "engine" / "model" / "resolution.py").read_text()
    named = set(re.findall(r'(?:Failure|Reason)\(\s*"([a-z-]+)"', source))
    assert named and named <= set(RESOLUTION_RULES)


def test_render_in_tree_rejects_a_bad_kube_version(capsys):
    assert main(["policy", "render", "--in-tree", "--kube-version", "one", str(POLICIES)]) == 2
    assert "--kube-version" in capsys.readouterr().err


def test_variant_policy_loads():
    assert policy_named("variant").settings.raw_requests == "deny"


def test_lint_says_render_needed_when_the_in_tree_policies_would_change(tmp_path, capsys):
    """Beside the policy directory, manifests/in-tree/rendered.yaml is what the apiserver enforces while the
    webhook is down: a policy change that alters it is `render-needed` until it is re-rendered."""
    import shutil

    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    (tmp_path / "manifests" / "in-tree").mkdir(parents=True)
    manifest = tmp_path / "manifests" / "in-tree" / "rendered.yaml"
    manifest.write_text(render_in_tree(policies), encoding="utf-8")
    main(["policy", "lint", str(policies)])
    assert "render-needed" not in capsys.readouterr().out
    text = (policies / "default.yaml").read_text().replace("classes: [dev]\n", "classes: [dev, batch]\n", 1)
    (policies / "default.yaml").write_text(text)
    main(["policy", "lint", str(policies)])
    out = capsys.readouterr().out
    assert "render-needed" in out and "manifests/in-tree/rendered.yaml" in out and "--in-tree" in out
    assert main(["policy", "render", "--in-tree", str(policies)]) == 0
    manifest.write_text(capsys.readouterr().out)
    main(["policy", "lint", str(policies)])
    assert "render-needed" not in capsys.readouterr().out
