"""``settings.enforcement`` and ``settings.mutation`` in what ``policy render`` emits: the in-tree deny
policy's binding follows the mode ([Deny] / [Warn, Audit] / [Audit]), the validating webhook fails open
under an observe mode, and with mutation off neither the mutating webhook nor a MutatingAdmissionPolicy
exists. Evaluated with the apiserver emulation: under an observe mode the in-tree policies deny nothing
the engine would deny under enforce, and still record it."""

from __future__ import annotations

import functools

import pytest
import yaml

from tests.conftest import POLICIES
from tests.intree.apiserver import ALLOW, DENY, InTree, Request
from webhook.cli import main
from webhook.policy import load_policy_texts
from webhook.policy.compiled import Policy
from webhook.render.core import RenderOptions, render
from webhook.render.intree import render as render_in_tree

POD = ("", "v1", "pods")


@functools.cache
def with_settings(**settings: str) -> Policy:
    doc = yaml.safe_load((POLICIES / "default.yaml").read_text())
    doc["spec"]["settings"].update(settings)
    return load_policy_texts([("default.yaml", yaml.safe_dump(doc))])


def _bindings(objects: list[dict]) -> dict[str, list[str]]:
    return {
        o["spec"]["policyName"]: o["spec"]["validationActions"]
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicyBinding"
    }


@pytest.mark.parametrize(
    ("mode", "actions"), [("enforce", ["Deny"]), ("warn", ["Warn", "Audit"]), ("audit", ["Audit"])]
)
def test_the_deny_policy_binds_the_modes_actions(mode, actions):
    bound = _bindings(render_in_tree(with_settings(enforcement=mode), RenderOptions()))
    assert bound["gpu-admission-in-tree-deny"] == actions
    assert all(a != ["Deny"] for name, a in bound.items() if mode != "enforce"), bound


def _unplaced_attack() -> dict:
    """A training pod in a serving namespace, pinned to a node, privileged, holding 16 GPUs, unplaced."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"gpu-admission.io/workload": "training"}},
        "spec": {
            "nodeName": "gpu-node-1",
            "containers": [
                {
                    "name": "c",
                    "image": "i",
                    "securityContext": {"privileged": True},
                    "resources": {"limits": {"nvidia.com/gpu": "16"}},
                }
            ],
        },
    }


def _review(objects: list[dict]):
    req = Request(
        _unplaced_attack(), None, "CREATE", POD, "team-a",
        {"gpu-admission.io/tier": "serving", "kubernetes.io/metadata.name": "team-a"},
    )  # fmt: skip
    return InTree(objects).review(req)


def test_enforce_denies_in_tree_and_observe_modes_record_the_same_findings():
    enforcing = _review(render_in_tree(with_settings(enforcement="enforce"), RenderOptions()))
    assert enforcing.decision == DENY and enforcing.messages
    warned = _review(render_in_tree(with_settings(enforcement="warn"), RenderOptions()))
    assert warned.decision == ALLOW and not warned.messages
    assert set(enforcing.messages) <= set(warned.warnings) and set(enforcing.messages) <= set(warned.audit)
    audited = _review(render_in_tree(with_settings(enforcement="audit"), RenderOptions()))
    assert audited.decision == ALLOW and not audited.messages
    assert not set(enforcing.messages) & set(audited.warnings)
    assert set(enforcing.messages) <= set(audited.audit)


def _placement_missing(objects: list[dict]) -> bool:
    return any(
        "placement-missing" in (v.get("message", "") + v.get("messageExpression", ""))
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicy"
        for v in o["spec"]["validations"]
    )


def test_mutation_off_renders_no_mutation_anywhere():
    on = with_settings()
    off = with_settings(mutation="off")
    options = RenderOptions(kube_version=(1, 36))
    assert any(o["kind"] == "MutatingAdmissionPolicy" for o in render_in_tree(on, options))
    assert not any(o["kind"].startswith("MutatingAdmissionPolicy") for o in render_in_tree(off, options))
    assert any(o["kind"] == "MutatingWebhookConfiguration" for o in render(on))
    assert not any(o["kind"] == "MutatingWebhookConfiguration" for o in render(off))


def test_placement_missing_stays_in_tree_unless_mutation_is_off_under_an_observe_mode():
    assert _placement_missing(render_in_tree(with_settings(), RenderOptions()))
    assert _placement_missing(render_in_tree(with_settings(mutation="off"), RenderOptions())), (
        "enforce with mutation off: an unplaced class pod is still refused"
    )
    assert not _placement_missing(render_in_tree(with_settings(mutation="off", enforcement="audit"), RenderOptions()))


@pytest.mark.parametrize("mode", ["warn", "audit"])
def test_the_validating_webhook_fails_open_under_an_observe_mode(mode):
    (validating,) = [
        o for o in render(with_settings(enforcement=mode)) if o["kind"] == "ValidatingWebhookConfiguration"
    ]
    assert validating["webhooks"][0]["failurePolicy"] == "Ignore"
    assert validating["metadata"]["annotations"]["gpu-admission.io/enforcement"] == mode
    (enforcing,) = [o for o in render(with_settings()) if o["kind"] == "ValidatingWebhookConfiguration"]
    assert enforcing["webhooks"][0]["failurePolicy"] == "Fail"
    assert "gpu-admission.io/enforcement" not in enforcing["metadata"]["annotations"]


def test_the_label_guard_still_denies_under_an_observe_mode():
    """Entitlements are the policy's inputs: observe mode changes what a rule does, not who may relabel."""
    guard = [
        o for o in render(with_settings(enforcement="audit"))
        if o["kind"] == "ValidatingAdmissionPolicyBinding"
    ]  # fmt: skip
    assert guard and all(o["spec"]["validationActions"] == ["Deny"] for o in guard)


def test_render_explain_says_the_mode(tmp_path, capsys):
    text = (
        (POLICIES / "default.yaml")
        .read_text()
        .replace("failure: allow", "failure: allow\n    enforcement: warn\n    mutation: off")
    )
    (tmp_path / "default.yaml").write_text(text)
    assert main(["policy", "render", "--explain", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("enforcement: warn (settings.enforcement): nothing is denied")
    assert "mutation: off (settings.mutation): /mutate returns no patch" in out
    assert "node-name-set [partly; action deny (enforcement warn: would deny)]" in out
