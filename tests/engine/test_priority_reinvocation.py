"""The Priority admission plugin runs again after our mutation: what we add must pass its second look.

Found on the real kube-apiserver (tests/e2e/test_scheduler.py): the plugin runs before the mutating
webhooks and, for a pod without a priorityClassName, writes the default ``priority: 0`` and
``preemptionPolicy: PreemptLowerPriority`` into the spec. Our webhook then adds the class's
priorityClassName; webhook reinvocation re-runs the built-in mutating plugins, and the Priority plugin
refuses a pod whose spec carries a priority or preemptionPolicy other than its class computes
(``plugin/pkg/admission/priority/admission.go``, ``admitPod``): "the string value of PreemptionPolicy
(PreemptLowerPriority) must not be provided in pod spec; priority admission controller computed Never".
The shipped ``gpu-batch-preemptible`` class has ``preemptionPolicy: Never``, so every batch pod was
refused on a real cluster while every emulation admitted it.
"""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from webhook import engine

KEY = "gpu-admission.io/workload"


def as_the_webhook_sees_it(cls: str) -> dict:
    """A class pod after the Priority plugin's first pass (no priorityClassName: the global default)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a", "labels": {KEY: cls}},
        "spec": {
            "containers": [{"name": "c", "image": "registry.example/app:1"}],
            "priority": 0,
            "preemptionPolicy": "PreemptLowerPriority",
            "schedulerName": "default-scheduler",
        },
    }


def priority_plugin_recheck(pod: dict, policy) -> None:
    """``admitPod`` on CREATE for a pod that names a PriorityClass: refuse a spec value it would not compute."""
    spec = pod["spec"]
    pc = policy.spec.priority_classes[spec["priorityClassName"]]
    if "priority" in spec and spec["priority"] != pc.value:
        raise AssertionError(f"the integer value of priority ({spec['priority']}) must not be provided in pod spec")
    policy_value = str(pc.preemption_policy)
    if "preemptionPolicy" in spec and spec["preemptionPolicy"] != policy_value:
        raise AssertionError(
            f"the string value of PreemptionPolicy ({spec['preemptionPolicy']}) must not be provided in pod spec; "
            f"priority admission controller computed {policy_value} from the given PriorityClass name"
        )


@pytest.mark.parametrize("cls", ["inference", "batch", "dev", "training"])
def test_every_class_pod_passes_the_priority_plugins_second_look(policy, cls):
    pod = as_the_webhook_sees_it(cls)
    m = engine.mutate(policy, engine.Request(copy.deepcopy(pod), namespace="team-a", namespace_labels={}))
    mutated = jsonpatch.apply_patch(pod, list(m.patch))
    assert mutated["spec"]["priorityClassName"]
    priority_plugin_recheck(mutated, policy)


def test_a_users_own_priority_class_is_left_alone(policy):
    pod = as_the_webhook_sees_it("batch")
    pod["spec"]["priorityClassName"] = "gpu-batch-preemptible"
    pod["spec"]["priority"] = 1000
    pod["spec"]["preemptionPolicy"] = "Never"
    m = engine.mutate(policy, engine.Request(copy.deepcopy(pod), namespace="team-a", namespace_labels={}))
    assert not any(op["path"] in ("/spec/priority", "/spec/preemptionPolicy") for op in m.patch)
