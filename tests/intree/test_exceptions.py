"""The in-tree policies and policy exceptions (SPEC §12, §14): CEL cannot verify an exception's requester
(a controller's pods) or a grant's signature, so the in-tree policies do not honour exceptions; and since
they run while the webhook is up too, a rule an exception names is off in-tree in the exception's
namespaces (for everyone there), so they never deny what the webhook excepts. Elsewhere they hold.
The apiserver is emulated (tests/intree/apiserver.py); the policy is the test's own."""

from __future__ import annotations

import datetime
from pathlib import Path

import jsonpatch

from tests.intree.apiserver import ALLOW, DENY, InTree, Request
from tests.intree.stored import default_pod_spec, defaulted, stored
from webhook import engine
from webhook.cli import main
from webhook.engine.model.requester import Requester
from webhook.policy import load_policy
from webhook.render.core import RenderOptions
from webhook.render.intree import render

POLICY = Path(__file__).parent / "exceptions"
POD = ("", "v1", "pods")
DEPLOYER = Requester("system:serviceaccount:ci:deployer")


def privileged_pod(**spec):
    container = {
        "name": "dcgm",
        "image": "nvcr.io/nvidia/dcgm:3",
        "securityContext": {"privileged": True},
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    meta = {"name": "dcgm"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container], **spec}}


def judge(obj, labels, requester=None):
    """Stored with the webhook up (its /mutate patch applied, re-defaulted), judged by both."""
    policy = load_policy(POLICY)
    labels = {"kubernetes.io/metadata.name": "team-a", **labels}
    obj = stored(obj, "team-a", policy)
    m = engine.mutate(policy, engine.Request(obj, namespace="team-a", namespace_labels=labels, requester=requester))
    if m.patch:
        obj = defaulted(jsonpatch.apply_patch(obj, list(m.patch)), "team-a")
        default_pod_spec(obj["spec"], pod=True)
    verdict = InTree(render(policy, RenderOptions())).review(Request(obj, None, "CREATE", POD, "team-a", labels, ""))
    decision = engine.report(
        policy,
        engine.Request(
            obj,
            namespace="team-a",
            namespace_labels=labels,
            stage=engine.Stage.STORED,
            requester=requester,
            today=datetime.date(2027, 1, 1),
        ),
    )
    assert not verdict.errors, verdict.errors
    return verdict, decision


def test_an_excepted_pod_is_not_denied_in_tree_while_the_webhook_admits_it():
    verdict, decision = judge(privileged_pod(), {"team": "gpu-diag"}, DEPLOYER)
    assert decision.allowed and [v.exception for v in decision.violations if v.rule == "privileged-gpu"] == [
        "dcgm-diag"
    ]
    assert not any(m.startswith("[privileged-gpu]") for m in verdict.messages), verdict.messages


def test_outside_the_exceptions_namespaces_the_rule_holds_in_tree():
    verdict, decision = judge(privileged_pod(), {"team": "other"}, DEPLOYER)
    assert verdict.decision == DENY and any(m.startswith("[privileged-gpu]") for m in verdict.messages)
    assert not decision.allowed


def test_in_the_namespace_only_the_excepted_rule_is_off_in_tree():
    """node-name-set is excepted elsewhere (team=migration): in gpu-diag it still holds in-tree."""
    verdict, _ = judge(privileged_pod(nodeName="a100-node-1"), {"team": "gpu-diag"}, DEPLOYER)
    assert any(m.startswith("[node-name-set]") for m in verdict.messages)
    assert not any(m.startswith("[privileged-gpu]") for m in verdict.messages)
    verdict, _ = judge(privileged_pod(nodeName="a100-node-1"), {"team": "migration"})
    assert verdict.decision == DENY and not any(m.startswith("[node-name-set]") for m in verdict.messages)


def test_a_policy_without_exceptions_is_unchanged():
    verdict, _ = judge(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
         "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "1"}}}]}},
        {"team": "gpu-diag"},
    )
    assert verdict.decision == ALLOW


def test_explain_lists_the_exceptions_and_says_the_in_tree_policies_do_not_honour_them(capsys):
    assert main(["policy", "render", "--explain", str(POLICY)]) == 0
    out = capsys.readouterr().out.split("\nexceptions (2; ", 1)[1]
    assert out.startswith("the in-tree policies do not honour exceptions")
    dcgm = out.split("dcgm-diag [", 1)[1].split("\npinning [", 1)[0]
    assert dcgm.startswith("expires 2099-01-01; owner platform-team]")
    for line in (
        "  rules: privileged-gpu",
        "  namespaces: team=gpu-diag",
        "  subjects: ServiceAccount:ci:deployer",
        "  reason: weekly NVIDIA DCGM diagnostics need a privileged container",
        "  in-tree: privileged-gpu not enforced in these namespaces (for anyone) while the webhook is down",
    ):
        assert line in dcgm.splitlines(), dcgm
    assert "pinning [expires 2099-01-01; owner infra-team]" in out and "subjects: Group:migrators" in out


def test_explain_says_when_there_are_none(capsys, tmp_path):
    text = (POLICY / "policy.yaml").read_text().split("  exceptions:")[0]
    (tmp_path / "policy.yaml").write_text(text)
    assert main(["policy", "render", "--explain", str(tmp_path)]) == 0
    assert capsys.readouterr().out.endswith("\nexceptions: none\n")
