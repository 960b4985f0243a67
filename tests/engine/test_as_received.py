"""``/validate`` judges the object as it arrives (``Stage.STORED``), not with our mutation re-applied.

The apiserver sends the validating webhook the object it is about to store, after every mutating
webhook ran. When ours ran, re-applying the mutation is a no-op, so both ways of judging must agree
(property below). When it did not (mutating ``failurePolicy: Ignore``, or a later webhook changed
what we set), only the object as received tells the truth about what will be stored.
"""

from __future__ import annotations

import copy

import jsonpatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import TRAINING_NS
from tests.engine.helpers import container, intent, pod, rules
from tests.engine.test_properties import intent_objects
from webhook.engine import Request, Stage, mutate, report

SERVING = {"gpu-admission.io/tier": "serving"}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=intent_objects(), training=st.booleans())
def test_an_object_we_mutated_gets_the_same_verdict_either_way(policy, obj, training):
    labels = TRAINING_NS if training else None
    mutated = mutate(policy, Request(copy.deepcopy(obj), namespace="ns", namespace_labels=labels))
    final = jsonpatch.apply_patch(obj, list(mutated.patch)) if mutated.patch else obj
    as_mutated = report(policy, Request(final, namespace="ns", namespace_labels=labels))
    as_received = report(policy, Request(final, namespace="ns", namespace_labels=labels, stage=Stage.STORED))
    assert as_received.violations == as_mutated.violations
    assert as_received.patch == (), "judging never patches"


def test_an_object_our_mutation_never_reached_is_judged_as_it_will_be_stored(policy):
    # A MIG profile the pool's A100-40GB does not offer; our mutation would have replaced it.
    raw = pod(intent("inference", gpu_memory="4Gi"), [container(limits={"nvidia.com/mig-1g.12gb": "1"})])
    offline = report(policy, Request(copy.deepcopy(raw), namespace="serving", namespace_labels=SERVING))
    assert "mig-profile-unavailable" not in rules(offline), "check judges the manifest after mutation"
    received = report(policy, Request(raw, namespace="serving", namespace_labels=SERVING, stage=Stage.STORED))
    assert "mig-profile-unavailable" in rules(received)
    assert received.allowed is False


def test_a_malformed_multus_annotation_is_still_reported(policy):
    meta = intent("training", gpus=8)
    meta["annotations"]["k8s.v1.cni.cncf.io/networks"] = '[{"name": '
    obj = pod(meta, [container()])
    received = report(policy, Request(obj, namespace="llm", namespace_labels=TRAINING_NS, stage=Stage.STORED))
    found = [v for v in received.violations if v.rule == "intent-invalid"]
    assert found and found[0].path == "metadata.annotations[k8s.v1.cni.cncf.io/networks]"
    assert "looks like JSON but does not parse" in found[0].message


def test_controllers_and_updates_are_still_judged_as_their_pods_will_be(policy):
    template = {"metadata": intent("inference", gpu_memory="4Gi"),
                "spec": {"containers": [container(limits={"nvidia.com/mig-1g.12gb": "1"})]}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d"}}, "template": template},
    }
    for operation in ("CREATE", "UPDATE"):
        kwargs = {"operation": operation, "namespace": "serving", "namespace_labels": SERVING}
        default = report(policy, Request(copy.deepcopy(deployment), **kwargs))
        received = report(policy, Request(copy.deepcopy(deployment), stage=Stage.STORED, **kwargs))
        assert received.violations == default.violations
        assert "mig-profile-unavailable" not in rules(received), "its pods will get the right profile"
