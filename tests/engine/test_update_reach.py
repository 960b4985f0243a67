"""A pod UPDATE that changes what the pod can reach is judged like the CREATE it replaces.

The attack (issue 41, item 1): a pod with no GPU resources (a CUDA image, whose own
``NVIDIA_VISIBLE_DEVICES=all`` opens every GPU of the node) is created with no toleration, so it is not
GPU-relevant and never gets ``NVIDIA_VISIBLE_DEVICES=void`` from ``/mutate``. It then gains a GPU
pool's tolerations by UPDATE (any pod may), and while scheduling-gated the pool's nodeSelector or
affinity (KEP-3838). A pod's env cannot change by UPDATE, so the only answer is a denial that says to
re-create the pod.
"""

from __future__ import annotations

import copy

from tests.engine.helpers import container, intent, pod, rules
from webhook.engine import Request, Stage, report
from webhook.engine.model.scheduling import ungates

SERVING = {"gpu-admission.io/tier": "serving"}
GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
TRAIN = {"key": "workload", "operator": "Equal", "value": "gpu-train", "effect": "NoSchedule"}
GATE = [{"name": "example.com/hold"}]


def _cuda(**spec) -> dict:
    """A CPU pod of a CUDA image: no GPU resource, no env of its own (the image sets all)."""
    return pod({"labels": {"app": "x"}}, [container(image="nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04")], **spec)


def _update(policy, new, old, labels=SERVING):
    return report(
        policy,
        Request(new, operation="UPDATE", old_object=old, namespace="team", namespace_labels=labels, stage=Stage.STORED),
    )


def _created(policy, obj, labels=SERVING):
    return report(policy, Request(obj, namespace="team", namespace_labels=labels, stage=Stage.STORED))


def test_a_gated_cpu_pod_that_gains_a_sliced_pools_tolerations_and_selector_is_denied(policy):
    old = _cuda(schedulingGates=GATE)
    assert not _created(policy, old).relevant, "created with no toleration: nothing to judge"
    new = copy.deepcopy(old)
    new["spec"]["tolerations"] = [GPU]
    new["spec"]["nodeSelector"] = {"workload": "gpu-dev"}
    d = _update(policy, new, old)
    assert not d.allowed
    found = [v for v in d.denials if v.rule == "privileged-gpu"]
    assert found and found[0].path == "spec.containers[0].env", [v.render() for v in d.violations]
    assert "re-create the pod" in found[0].message and "dev-cgpu" in found[0].message


def test_a_pending_cpu_pod_that_gains_a_whole_gpu_pools_tolerations_is_denied(policy):
    """Not gated: tolerations alone may be added to any pod, and train-h100 (whole GPUs, a pool the
    serving namespace is not entitled to) is reached by them."""
    old = _cuda()
    new = copy.deepcopy(old)
    new["spec"]["tolerations"] = [GPU, TRAIN]
    d = _update(policy, new, old)
    assert "privileged-gpu" in rules(d) and not d.allowed, [v.render() for v in d.violations]


def test_a_blanket_toleration_added_by_update_is_denied(policy):
    old = _cuda()
    new = copy.deepcopy(old)
    new["spec"]["tolerations"] = [{"operator": "Exists"}]
    assert not _update(policy, new, old).allowed


def test_a_cpu_pod_created_with_the_void_may_gain_tolerations(policy):
    """What CREATE admits (the pod reached a GPU pool and got the void from /mutate) an UPDATE admits."""
    old = _cuda(tolerations=[GPU])
    old["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    assert _created(policy, old).allowed
    new = copy.deepcopy(old)
    new["spec"]["tolerations"] = [GPU, TRAIN]
    d = _update(policy, new, old)
    assert d.allowed, [v.render() for v in d.violations]


def test_an_update_that_changes_no_reach_is_not_news(policy):
    """A pod bound before the webhook existed, without the void: relabelling it is not the update's doing."""
    old = _cuda(tolerations=[GPU], nodeName="gpu-node-1")
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["pod-template-hash"] = "7d9c5b"
    d = _update(policy, new, old)
    assert d.allowed, [v.render() for v in d.violations]


def test_removing_the_last_gate_judges_the_pod_whole(policy):
    """The gated pod gained a pool's tolerations while nothing judged it (the webhook down, in-tree
    availability): what the old object already was is no excuse when the pod becomes schedulable."""
    old = _cuda(schedulingGates=GATE, tolerations=[GPU], nodeSelector={"workload": "gpu-dev"})
    new = copy.deepcopy(old)
    del new["spec"]["schedulingGates"]
    assert ungates(new, old)
    d = _update(policy, new, old)
    assert not d.allowed and "privileged-gpu" in rules(d), [v.render() for v in d.violations]
    still = copy.deepcopy(old)
    still["spec"]["schedulingGates"] = [*GATE, {"name": "other"}]
    assert not ungates(still, old) and _update(policy, still, old).allowed, "still gated: not news"


def test_removing_a_gate_of_a_clean_pod_is_admitted(policy):
    old = _cuda(schedulingGates=GATE)
    new = copy.deepcopy(old)
    new["spec"]["schedulingGates"] = []
    assert ungates(new, old)
    assert _update(policy, new, old).allowed


def test_a_gated_raw_gpu_pod_that_gains_another_pools_selector_is_pool_spoofing(policy):
    """GPU pods were judged on UPDATE already; the same holds for reach they gain while gated."""
    raw = pod({}, [container(limits={"nvidia.com/gpu": "1"})], schedulingGates=GATE)
    created = _created(policy, raw)
    old = copy.deepcopy(raw)
    for op in created.patch:
        if op["path"] in ("/spec/nodeSelector", "/spec/tolerations"):
            old["spec"][op["path"].rsplit("/", 1)[1]] = copy.deepcopy(op["value"])
    new = copy.deepcopy(old)
    new["spec"]["nodeSelector"] = {"workload": "gpu-train"}
    new["spec"]["tolerations"] = [GPU, TRAIN]
    d = _update(policy, new, old)
    assert not d.allowed and "pool-spoofing" in rules(d), [v.render() for v in d.violations]


def test_a_class_pod_ungated_is_judged_like_at_create(policy):
    """A clean inference pod (as /mutate stored it) loses its gate: nothing to deny."""
    obj = pod(intent("inference", gpu_memory="4Gi"), [container()], schedulingGates=GATE)
    created = report(policy, Request(obj, namespace="team", namespace_labels=SERVING))
    import jsonpatch

    old = jsonpatch.apply_patch(obj, list(created.patch))
    new = copy.deepcopy(old)
    del new["spec"]["schedulingGates"]
    d = _update(policy, new, old)
    assert d.allowed, [v.render() for v in d.denials]
