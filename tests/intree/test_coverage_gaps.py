"""Round-3 red-team gaps in the in-tree policies (webhook down), each an object the engine denies as stored.

An attacker with create/update rights on Pods in one namespace, the webhook unreachable: a class pod
placed only in part (a nodeSelector written by hand, no device resources or no pool toleration), a raw
MIG request with a blanket toleration in a namespace not entitled to the MIG pool, GPUs held by native
sidecars or an ordinary init container past the class maximum, and a pod UPDATE that gains reach to a
pool the namespace may not use. Each is judged by the rendered in-tree policies (emulated apiserver)
and by the engine on the same stored object; and the same objects as the webhook places them are
admitted by both.
"""

from __future__ import annotations

import copy

import pytest

from tests.intree.apiserver import ALLOW
from tests.intree.conftest import policy_named
from tests.intree.stored import stored
from tests.intree.test_webhook_down import KEY, SANDBOX, SERVING, denied_by, down, judge, pod, up

TRAIN_TOLERATIONS = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "workload", "operator": "Equal", "value": "gpu-train", "effect": "NoSchedule"},
]


def _training(limits=None, **spec):
    return pod({KEY: "training"}, limits=limits, **spec)


PARTIAL = {
    "nodeSelector and tolerations, no GPUs": _training(
        nodeSelector={"workload": "gpu-train"}, tolerations=copy.deepcopy(TRAIN_TOLERATIONS)
    ),
    "nodeSelector and GPUs, no pool toleration": _training(
        limits={"nvidia.com/gpu": "8"}, nodeSelector={"workload": "gpu-train"}
    ),
    "nodeSelector, GPUs, one of two pool tolerations": _training(
        limits={"nvidia.com/gpu": "8"}, nodeSelector={"workload": "gpu-train"}, tolerations=[TRAIN_TOLERATIONS[0]]
    ),
}


@pytest.mark.parametrize("case", sorted(PARTIAL))
def test_a_partly_placed_class_pod_is_placement_missing(case):
    verdict, decision = down(copy.deepcopy(PARTIAL[case]))
    denied_by(verdict, decision, "placement-missing")
    assert any("webhook unavailable, retry" in m for m in verdict.messages)


@pytest.mark.parametrize("label", [{}, {KEY: "none"}])
def test_a_raw_mig_pod_with_a_blanket_toleration_in_a_sandbox_is_pool_spoofing(label):
    """The opt-out label (``none``) declares no class: the pod is a raw request to the engine, and to CEL."""
    raw = pod(label, limits={"nvidia.com/mig-1g.5gb": "1"}, tolerations=[{"operator": "Exists"}])
    denied_by(*down(raw, SANDBOX), "pool-spoofing")


GPU = "nvidia.com/gpu"
SIDECAR_GPUS = {
    "native sidecars add to the regular containers": {
        "containers": [{"name": "c", "image": "t:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        "initContainers": [
            {"name": f"s{i}", "image": "t:1", "restartPolicy": "Always", "resources": {"limits": {GPU: "1"}}}
            for i in range(3)
        ],
    },
    "an ordinary init container past the maximum": {
        "containers": [{"name": "c", "image": "t:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        "initContainers": [{"name": "i", "image": "t:1", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
    },
}


@pytest.mark.parametrize("case", sorted(SIDECAR_GPUS))
def test_gpus_held_by_sidecars_or_init_containers_count_against_the_class_maximum(case):
    obj = pod({KEY: "inference"}, {"gpu-admission.io/isolation": "exclusive"})
    obj["spec"].update(copy.deepcopy(SIDECAR_GPUS[case]))
    denied_by(*down(obj), "gpu-count-exceeded")


def test_an_init_container_within_the_maximum_is_not_gpu_count_exceeded():
    """Kubernetes accounting: an ordinary init container runs alone; 2 + 2 is 2, not 4 (inference: 2)."""
    obj = pod({KEY: "inference"}, {"gpu-admission.io/isolation": "exclusive"}, limits={"nvidia.com/gpu": "2"})
    obj["spec"]["initContainers"] = [{"name": "i", "image": "t:1", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
    verdict, decision = down(obj)
    assert not any(m.startswith("[gpu-count-exceeded]") for m in verdict.messages), verdict.messages
    assert not [v for v in decision.violations if v.rule == "gpu-count-exceeded"]


def test_placement_missing_survives_an_omitted_subresource():
    """The apiserver leaves an empty ``subResource`` out of ``request``: the denial must still say retry,
    not fail as an expression error."""
    verdict, _ = down(pod({KEY: "inference"}))
    assert any("webhook unavailable, retry" in m for m in verdict.messages), verdict.messages


@pytest.mark.parametrize("cls", ["inference", "training"])
def test_the_placed_pods_stay_admitted(cls):
    verdict, decision = up(pod({KEY: cls}))
    assert decision.allowed and verdict.decision == ALLOW, verdict.messages


# --- a CPU pod reaches a GPU pool by UPDATE -------------------------------------------------------------------

CUDA_ENV = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]


def _cpu_pod(**spec):
    obj = pod(**spec)
    obj["spec"]["containers"][0]["env"] = copy.deepcopy(CUDA_ENV)
    return stored(obj, "team-a", policy_named("default"))


def _update(old, **changes):
    new = copy.deepcopy(old)
    new["spec"].update(copy.deepcopy(changes))
    return new


def test_an_update_adding_a_foreign_pools_tolerations_is_denied():
    old = _cpu_pod()
    new = _update(old, tolerations=old["spec"]["tolerations"] + TRAIN_TOLERATIONS)
    verdict, decision = judge(new, SERVING, operation="UPDATE", old=old)
    denied_by(verdict, decision, "privileged-gpu")
    assert any("re-create" in m for m in verdict.messages), verdict.messages


def test_an_update_adding_a_blanket_toleration_is_denied():
    old = _cpu_pod()
    new = _update(old, tolerations=[*old["spec"]["tolerations"], {"operator": "Exists"}])
    denied_by(*judge(new, SANDBOX, operation="UPDATE", old=old), "privileged-gpu")


def test_a_gated_pod_gaining_a_foreign_pools_selector_and_tolerations_is_denied():
    old = _cpu_pod(schedulingGates=[{"name": "example.com/hold"}])
    new = _update(
        old,
        nodeSelector={"workload": "gpu-train"},
        tolerations=old["spec"]["tolerations"] + TRAIN_TOLERATIONS,
    )
    denied_by(*judge(new, SERVING, operation="UPDATE", old=old), "privileged-gpu")


def test_an_update_that_keeps_reach_is_admitted():
    old = _cpu_pod(tolerations=[{"operator": "Exists"}])
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["team"] = "x"
    verdict, _ = judge(new, SANDBOX, operation="UPDATE", old=old)
    assert verdict.decision == ALLOW, verdict.messages


def test_an_update_adding_an_entitled_pools_toleration_is_admitted():
    """The default namespace may use every pool: gaining reach there is no violation."""
    old = _cpu_pod()
    new = _update(old, tolerations=old["spec"]["tolerations"] + TRAIN_TOLERATIONS)
    verdict, _ = judge(new, operation="UPDATE", old=old)
    assert verdict.decision == ALLOW, verdict.messages


def _plain_cpu_update(env=None):
    obj = pod()
    if env is not None:
        obj["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": env}]
    old = stored(obj, "team-a", policy_named("default"))
    return old, _update(old, tolerations=old["spec"]["tolerations"] + TRAIN_TOLERATIONS)


def test_a_plain_cpu_pods_update_gaining_a_foreign_pool_is_denied_as_the_engine_does():
    """No toolkit env in the pod: the image may still set NVIDIA_VISIBLE_DEVICES=all (CUDA images do). The
    engine's UPDATE-reach rule reports it under privileged-gpu (main since 32cc283)."""
    old, new = _plain_cpu_update()
    verdict, decision = judge(new, SERVING, operation="UPDATE", old=old)
    denied_by(verdict, decision, "privileged-gpu")
    assert any(m.startswith("[privileged-gpu] the pod update") for m in verdict.messages), verdict.messages


def test_a_pod_whose_containers_void_the_devices_may_gain_reach():
    """Every container sets NVIDIA_VISIBLE_DEVICES=void: the engine admits the update, so must the VAP."""
    old, new = _plain_cpu_update(env="void")
    verdict, decision = judge(new, SERVING, operation="UPDATE", old=old)
    assert decision.allowed and verdict.decision == ALLOW, verdict.messages
