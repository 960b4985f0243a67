"""The namespace labels the policy trusts are guarded: only the platform group may set, change or remove them.

The attacker: a tenant allowed to update (label) their own namespace, or to create namespaces. With the
shipped policy a namespace labelled ``gpu-admission.io/tier: serving`` may not train; removing that label
(or creating a namespace with ``gpu-admission.io/raw-gpus: allowed``) would grant more. The rendered
ValidatingAdmissionPolicy is evaluated as the API server would (``cel_policy``, cel-python standing in
for cel-go) against Namespace CREATE and UPDATE requests.
"""

from __future__ import annotations

import copy
from pathlib import Path

import kubernetes_validate
import pytest

from tests.conftest import POLICIES
from tests.deploy.cel_match import unguarded_has
from tests.deploy.cel_policy import ALLOW, DENY, AdmissionPolicy
from tests.deploy.conftest import one, render
from webhook.policy import load_policy
from webhook.render import render as render_policy
from webhook.render.label_guard import NAME, guarded_labels

DEFAULT_TEXT = (POLICIES / "default.yaml").read_text()
PLATFORM = ("system:authenticated", "gpu-admission:platform")
TENANT = ("system:authenticated", "system:serviceaccounts", "team-a-admins")
TIER, RAW = "gpu-admission.io/tier", "gpu-admission.io/raw-gpus"


def guard_of(objects: list[dict]) -> AdmissionPolicy:
    return AdmissionPolicy(
        one(objects, "ValidatingAdmissionPolicy", NAME), one(objects, "ValidatingAdmissionPolicyBinding", NAME)
    )


@pytest.fixture(scope="module")
def guard(policy) -> AdmissionPolicy:
    return guard_of(render_policy(policy))


def namespace(labels: dict[str, str] | None = None, name: str = "team-a") -> dict:
    meta: dict = {"name": name, "labels": {"kubernetes.io/metadata.name": name, **(labels or {})}}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def relabel(ns: dict, **changes: str | None) -> dict:
    new = copy.deepcopy(ns)
    for key, value in changes.items():
        key = {"tier": TIER, "raw": RAW}.get(key, key)
        if value is None:
            new["metadata"]["labels"].pop(key, None)
        else:
            new["metadata"]["labels"][key] = value
    return new


# --- what is guarded -----------------------------------------------------------------------------


def test_the_guarded_keys_are_every_key_the_shipped_policy_selects_on(policy):
    assert guarded_labels(policy) == (RAW, TIER)


def test_match_expressions_keys_and_rule_selectors_are_guarded_the_name_label_is_not(tmp_path: Path):
    text = DEFAULT_TEXT.replace(
        "  namespaces:\n",
        "  namespaces:\n"
        "    - name: by-name\n"
        "      selector: {matchLabels: {kubernetes.io/metadata.name: ml-infra}}\n"
        "      classes: [training]\n"
        "    - name: research\n"
        "      selector:\n"
        "        matchExpressions: [{key: example.com/org, operator: In, values: [research]}]\n"
        "      classes: [training]\n",
        1,
    )
    text = text.replace(
        "  rules:\n",
        "  rules:\n"
        "    gpu-count-exceeded:\n"
        "      namespaces:\n"
        "        - selector: {matchExpressions: [{key: example.com/sandbox, operator: Exists}]}\n"
        "          action: audit\n",
        1,
    )
    assert text.count("example.com/") == 2
    (tmp_path / "p.yaml").write_text(text)
    policy = load_policy(tmp_path)
    assert guarded_labels(policy) == ("example.com/org", "example.com/sandbox", RAW, TIER)
    guard = guard_of(render_policy(policy))
    ns = namespace({"example.com/org": "ops"})
    assert guard.review(relabel(ns, **{"example.com/org": "research"}), operation="UPDATE", old=ns).decision == DENY
    assert guard.review(namespace({"example.com/sandbox": ""}), groups=TENANT).decision == DENY
    # the apiserver sets the name label on every namespace: guarding it would deny every creation
    assert guard.review(namespace(name="ml-infra"), groups=TENANT).decision == ALLOW


def test_a_policy_that_selects_on_no_label_renders_no_guard(tmp_path: Path):
    text = DEFAULT_TEXT
    for block in (
        "    - name: serving-teams",
        "    - name: sandbox",
    ):
        start = text.index(block)
        end = text.index("    - name:", start + 1)
        text = text[:start] + text[end:]
    start = text.index("      exempt:\n")
    end = text.index("\n", text.index("raw-gpus", start)) + 1
    text = text[:start] + text[end:]
    (tmp_path / "p.yaml").write_text(text)
    policy = load_policy(tmp_path)
    assert guarded_labels(policy) == ()
    assert not [o for o in render_policy(policy) if "AdmissionPolicy" in o["kind"]]


def test_platform_group_comes_from_the_policy(tmp_path: Path):
    text = DEFAULT_TEXT.replace("    failure: allow ", "    platformGroup: acme:gpu-admins\n    failure: allow ", 1)
    assert text != DEFAULT_TEXT
    (tmp_path / "p.yaml").write_text(text)
    guard = guard_of(render_policy(load_policy(tmp_path)))
    created = namespace({TIER: "serving"})
    assert guard.review(created, groups=PLATFORM).decision == DENY
    verdict = guard.review(created, groups=("system:authenticated", "acme:gpu-admins"))
    assert verdict.decision == ALLOW and not verdict.errors


def test_lint_says_a_new_platform_group_needs_a_render(tmp_path: Path, capsys):
    from webhook.cli import main

    text = DEFAULT_TEXT.replace("    failure: allow ", "    platformGroup: acme:gpu-admins\n    failure: allow ", 1)
    (tmp_path / "p.yaml").write_text(text)
    main(["policy", "lint", str(tmp_path)])
    out = capsys.readouterr().out
    assert "[render-needed] settings.platformGroup (acme:gpu-admins) is not the group the shipped" in out, out
    main(["policy", "lint", str(POLICIES)])
    assert "platformGroup" not in capsys.readouterr().out


# --- who may do what -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old_labels", "change", "what"),
    [
        ({}, {"tier": "serving"}, "added"),
        ({TIER: "serving"}, {"tier": "sandbox"}, "changed"),
        ({TIER: "serving"}, {"tier": None}, "removed"),  # the shipped default: unlabelled = may train
        ({}, {"raw": "allowed"}, "exemption added"),
    ],
)
def test_only_the_platform_group_may_set_change_or_remove_a_guarded_label(guard, old_labels, change, what):
    old = namespace(old_labels)
    new = relabel(old, **change)
    tenant = guard.review(new, operation="UPDATE", old=old, groups=TENANT)
    assert tenant.decision == DENY, what
    key = TIER if "tier" in change else RAW
    assert tenant.message.startswith(f"namespace label {key} grants GPU classes or exemptions"), tenant.message
    assert "only members of group gpu-admission:platform may set, change or remove it" in tenant.message
    assert not tenant.errors  # denied by the expression, not by an evaluation error
    platform = guard.review(new, operation="UPDATE", old=old, groups=PLATFORM)
    assert platform.decision == ALLOW and not platform.errors, what
    admin = guard.review(new, operation="UPDATE", old=old, user="kubernetes-admin", groups=("system:masters",))
    assert admin.decision == ALLOW, "system:masters is the break-glass identity"


def test_a_namespace_created_with_a_guarded_label(guard):
    created = namespace({TIER: "serving", "team": "a"})
    denied = guard.review(created, groups=TENANT)
    assert denied.decision == DENY and TIER in denied.message
    assert guard.review(created, groups=PLATFORM).decision == ALLOW
    assert guard.review(namespace({"team": "a"}), groups=TENANT).decision == ALLOW  # nothing guarded


def test_two_guarded_labels_at_once_are_counted_in_the_message(guard):
    denied = guard.review(namespace({TIER: "serving", RAW: "allowed"}), groups=TENANT)
    assert denied.decision == DENY
    assert denied.message.startswith(f"namespace label {RAW} (and 1 more guarded label(s)) grants"), denied.message


def test_anyone_may_change_other_labels_and_updates_that_keep_the_guarded_ones(guard):
    old = namespace({TIER: "serving", "team": "a"})
    for new in (
        relabel(old, team="b"),  # unrelated label changed
        relabel(old, owner="bob"),  # unrelated label added
        relabel(old, team=None),  # unrelated label removed
        old,  # untouched (e.g. an annotation change, the namespace controller's finalize)
    ):
        verdict = guard.review(new, operation="UPDATE", old=old, groups=TENANT)
        assert verdict.decision == ALLOW and not verdict.errors, new["metadata"]["labels"]


def test_subresources_cannot_carry_a_label_change(guard):
    old = namespace({TIER: "serving"})
    new = relabel(old, tier=None)
    for sub in ("namespaces/status", "namespaces/finalize"):
        verdict = guard.review(new, operation="UPDATE", old=old, groups=TENANT, resource=("", "v1", sub))
        assert verdict.decision == DENY, sub


def test_a_namespace_without_labels_and_a_user_without_groups_are_no_evaluation_errors(guard):
    bare = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bare"}}
    verdict = guard.review(bare, groups=())
    assert verdict.decision == ALLOW and not verdict.errors
    old = namespace({TIER: "serving"})
    verdict = guard.review(bare | {"metadata": {"name": "team-a"}}, operation="UPDATE", old=old, groups=())
    assert verdict.decision == DENY and not verdict.errors  # removing every label removes the guarded one


def test_only_namespace_create_and_update_are_matched(guard):
    assert guard.matches("", "v1", "namespaces", "CREATE") and guard.matches("", "v1", "namespaces", "UPDATE")
    assert not guard.matches("", "v1", "namespaces", "DELETE")
    assert not guard.matches("", "v1", "pods", "CREATE")


# --- the objects ---------------------------------------------------------------------------------


def test_policy_and_binding_are_what_the_api_server_accepts(policy):
    objects = [o for o in render_policy(policy) if o["kind"].startswith("ValidatingAdmissionPolicy")]
    assert [o["kind"] for o in objects] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    for version in ("1.30.0", "1.37.0"):
        for obj in objects:
            kubernetes_validate.validate(obj, version, strict=True)
    vap, binding = objects
    assert vap["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"] == {"policyName": NAME, "validationActions": ["Deny"]}
    assert "namespace" not in vap["metadata"] and "namespace" not in binding["metadata"]
    # the apiserver's own validation: names of variables are CEL identifiers, messages have no line breaks
    for variable in vap["spec"]["variables"]:
        assert variable["name"].isidentifier()
    for validation in vap["spec"]["validations"]:
        assert "\n" not in validation["message"]
        assert validation["reason"] in ("Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge")
    expressions = [v["expression"] for v in vap["spec"]["variables"]]
    expressions += [v[k] for v in vap["spec"]["validations"] for k in ("expression", "messageExpression")]
    for expression in expressions:
        assert unguarded_has(expression) == [], expression
        assert "oldObject" not in expression or "request.operation == 'UPDATE' &&" in expression


def test_the_installed_base_carries_the_guard_cluster_scoped(rendered):
    _, docs = rendered
    vap = one(docs, "ValidatingAdmissionPolicy", NAME)
    binding = one(docs, "ValidatingAdmissionPolicyBinding", NAME)
    assert "namespace" not in vap["metadata"] and "namespace" not in binding["metadata"]
    guard = AdmissionPolicy(vap, binding)
    assert guard.review(namespace({TIER: "sandbox"}), groups=TENANT).decision == DENY


def test_the_root_kustomization_carries_it_too():
    docs = render("root")
    assert "namespace" not in one(docs, "ValidatingAdmissionPolicy", NAME)["metadata"]
