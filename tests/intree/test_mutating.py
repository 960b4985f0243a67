"""MutatingAdmissionPolicies (1.36+): the common class pod is placed and admitted while the webhook is down,
and the webhook's mutation is idempotent on what a policy did, in both orders.

The apiserver is emulated (``tests/intree/apiserver.py``: ``Mutating`` applies the rendered policies'
JSONPatch expressions as it does, ``InTree`` judges the result; cel-python for cel-go).
"""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from tests.intree.apiserver import ALLOW, InTree, Mutating, Request
from tests.intree.conftest import in_tree, policy_named
from tests.intree.stored import default_pod_spec, defaulted, stored
from webhook import engine
from webhook.render.intree.mutating import placement

KEY = "gpu-admission.io/workload"
POD = ("", "v1", "pods")
NAME_LABEL = "kubernetes.io/metadata.name"
V136 = (1, 36)


def shapes(cls: str) -> dict[str, dict]:
    base = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {KEY: cls, "app": "x"}},
        "spec": {"containers": [{"name": "main", "image": "registry/app:1"}]},
    }
    out = {"bare": base}
    cpu = copy.deepcopy(base)
    cpu["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": "2", "memory": "4Gi"},
        "requests": {"cpu": "2", "memory": "4Gi"},
    }
    out["cpu limits and requests"] = cpu
    sel = copy.deepcopy(base)
    sel["spec"]["nodeSelector"] = {"kubernetes.io/arch": "amd64"}
    sel["spec"]["tolerations"] = [{"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}]
    out["own selector and toleration"] = sel
    return out


def entitled_labels(name: str, cls: str) -> list[dict[str, str]]:
    out = []
    for ent in policy_named(name).namespaces:
        if cls in ent.classes and not ent.selector.match_expressions:
            out.append(dict(ent.selector.match_labels))
    return out


def cases():
    for name in ("default", "providers", "dra-example"):
        policy = policy_named(name)
        for cls in policy.classes:
            if placement(policy, cls) is None:
                continue
            for labels in entitled_labels(name, cls):
                for shape in shapes(cls):
                    yield pytest.param(name, cls, labels, shape, id=f"{name}-{cls}-{shape}-{labels or 'unlabelled'}")


def _setting(name):
    objects = list(in_tree(name, V136))
    return Mutating(objects), InTree(objects), policy_named(name)


def _mutate_with_webhook(policy, obj, labels):
    m = engine.mutate(policy, engine.Request(obj, namespace="team-a", namespace_labels=labels))
    out = defaulted(jsonpatch.apply_patch(obj, list(m.patch)), "team-a") if m.patch else obj
    default_pod_spec(out["spec"], pod=True)
    return m.patch, out


def test_the_shipped_policy_places_its_simple_classes_in_tree():
    policy = policy_named("default")
    placed = sorted(c for c in policy.classes if placement(policy, c) is not None)
    assert placed == ["batch", "dev", "inference"]  # training needs RDMA, gang and topology: the webhook's


def test_no_policies_before_1_36():
    assert not [o for o in in_tree("default") if o["kind"].startswith("Mutating")]
    assert [o for o in in_tree("default", V136) if o["kind"] == "MutatingAdmissionPolicy"]


@pytest.mark.parametrize(("name", "cls", "labels", "shape"), list(cases()))
def test_placed_and_admitted_while_the_webhook_is_down_and_idempotent_both_ways(name, cls, labels, shape):
    maps, vaps, policy = _setting(name)
    full = {NAME_LABEL: "team-a", **labels}
    raw = stored(shapes(cls)[shape], "team-a", policy)
    req = Request(raw, None, "CREATE", POD, "team-a", full)
    placed, applied = maps.admit(req)
    assert placed is not None and applied == [f"gpu-admission-in-tree-place-{cls}"]
    placed = defaulted(placed, "team-a")
    default_pod_spec(placed["spec"], pod=True)
    # webhook down: the in-tree validating policies and the engine's validating view admit it
    verdict = vaps.review(Request(placed, None, "CREATE", POD, "team-a", full))
    assert verdict.decision == ALLOW and not verdict.errors, verdict.messages
    decision = engine.report(
        policy, engine.Request(placed, namespace="team-a", namespace_labels=full, stage=engine.Stage.STORED)
    )
    assert decision.allowed, [(v.rule, v.message) for v in decision.violations]
    # MAP, then the webhook: its patch is empty
    patch, _ = _mutate_with_webhook(policy, placed, full)
    assert list(patch) == [], patch
    # the webhook, then the MAP (reinvocation): the policy changes nothing
    _, by_webhook = _mutate_with_webhook(policy, raw, full)
    again, applied = maps.admit(Request(by_webhook, None, "CREATE", POD, "team-a", full))
    assert applied == [] and again == by_webhook


NOT_SIMPLE = {
    "an intent annotation": lambda p: (
        p["metadata"].setdefault("annotations", {}).update({"gpu-admission.io/gpu-memory": "20Gi"})
    ),
    "GPUs of its own": lambda p: p["spec"]["containers"][0].update({"resources": {"limits": {"nvidia.com/gpu": "1"}}}),
    "a conflicting nodeSelector": lambda p: p["spec"].update({"nodeSelector": {"workload": "gpu-train"}}),
    "required node affinity": lambda p: p["spec"].update(
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                        ]
                    }
                }
            }
        }
    ),
    "nodeName": lambda p: p["spec"].update({"nodeName": "n1"}),
    # its other containers need NVIDIA_VISIBLE_DEVICES=void, written per container by the webhook
    "a sidecar and an init container": lambda p: (
        p["spec"]["containers"].append({"name": "sidecar", "image": "envoy:1"}),
        p["spec"].update({"initContainers": [{"name": "init", "image": "busybox:1"}]}),
    ),
}


@pytest.mark.parametrize("case", sorted(NOT_SIMPLE))
def test_pods_that_are_not_the_simple_case_are_left_to_the_webhook(case):
    maps, _, policy = _setting("default")
    pod = copy.deepcopy(shapes("inference")["bare"])
    NOT_SIMPLE[case](pod)
    raw = stored(pod, "team-a", policy)
    out, applied = maps.admit(Request(raw, None, "CREATE", POD, "team-a", {NAME_LABEL: "team-a"}))
    assert applied == [] and out == raw


def test_a_namespace_not_entitled_to_the_class_is_left_to_the_webhook():
    maps, vaps, policy = _setting("default")
    labels = {NAME_LABEL: "team-a", "gpu-admission.io/tier": "sandbox"}  # dev only
    raw = stored(shapes("inference")["bare"], "team-a", policy)
    out, applied = maps.admit(Request(raw, None, "CREATE", POD, "team-a", labels))
    assert applied == [] and out == raw
    verdict = vaps.review(Request(raw, None, "CREATE", POD, "team-a", labels))
    assert any(m.startswith("[class-not-allowed]") for m in verdict.messages)


def test_training_pods_are_still_denied_unplaced_while_the_webhook_is_down():
    maps, vaps, policy = _setting("default")
    raw = stored(shapes("training")["bare"], "team-a", policy)
    out, applied = maps.admit(Request(raw, None, "CREATE", POD, "team-a", {NAME_LABEL: "team-a"}))
    assert applied == []
    verdict = vaps.review(Request(out, None, "CREATE", POD, "team-a", {NAME_LABEL: "team-a"}))
    assert any("webhook unavailable, retry" in m for m in verdict.messages)
