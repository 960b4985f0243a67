"""UPDATEs are judged as the object will be stored, and report only what the update introduces.

The old objects are what admission stored: the engine's own CREATE output (patch applied with
jsonpatch), so every UPDATE here starts from a state the webhook admitted.
"""

from __future__ import annotations

import copy
from pathlib import Path

import jsonpatch
import pytest

from tests.engine.helpers import container, intent, job, pod, rules
from webhook.engine import Request, Stage, explain, report
from webhook.engine.model.cluster import Cluster
from webhook.policy import load_policy

SERVING = {"gpu-admission.io/tier": "serving"}


@pytest.fixture(scope="module")
def providers():
    return load_policy(Path(__file__).parent / "policies" / "providers.yaml")


def _stored(policy, obj, labels=SERVING):
    """The object as the apiserver stores it after our /mutate and an admitting /validate."""
    decision = report(policy, Request(obj, namespace="team", namespace_labels=labels))
    assert decision.allowed, [v.render() for v in decision.denials]
    return jsonpatch.apply_patch(obj, list(decision.patch)) if decision.patch else copy.deepcopy(obj)


def _update(policy, new, old, labels=SERVING, entry=report, **kwargs):
    return entry(
        policy,
        Request(
            new,
            operation="UPDATE",
            old_object=old,
            namespace="team",
            namespace_labels=labels,
            stage=Stage.STORED,
            **kwargs,
        ),
    )


def _mig_job(policy):
    old = _stored(policy, job(intent("inference", gpu_memory="4Gi"), parallelism=1))
    old["spec"]["suspend"] = True
    return old


def test_a_suspended_jobs_template_is_judged_as_stored_not_as_if_remutated(policy):
    """The template gains 8 whole GPUs next to its MIG slice. The mutation, re-applied in memory,
    would rewrite the GPU resources and hide it; nothing re-mutates an UPDATE, so it is stored."""
    old = _mig_job(policy)
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "8"
    decision = _update(policy, new, old)
    assert not decision.allowed
    assert "gpu-kind-mixed" in rules(decision)
    assert decision.patch == (), "an UPDATE is never mutated"


def test_a_suspended_job_that_drops_its_pool_is_judged_without_the_pool(policy):
    """The issue's case: the pool's selector removed and a blanket toleration added. Judged as
    stored, the template has neither the pool's selector nor anything that pins it."""
    old = _mig_job(policy)
    new = copy.deepcopy(old)
    spec = new["spec"]["template"]["spec"]
    del spec["nodeSelector"]
    spec["tolerations"] = [{"operator": "Exists"}]
    decision = _update(policy, new, old, entry=explain)
    assert "patch: 0 operation(s)" in decision.explanation[-1]
    # the rules see the stored template: it no longer names the pool it was resolved to
    seen = [line for line in decision.explanation if "gpu-infer" in line]
    assert not any("nodeSelector" in line and "gpu-infer" in line for line in seen)


def test_a_bound_pods_label_update_is_not_a_new_violation(policy):
    """A pod bound before the webhook existed carries violations; its controller keeps relabelling it."""
    bound = _stored(policy, pod(intent("inference", gpu_memory="4Gi"), [container()]))
    bound["spec"]["nodeName"] = "gpu-node-1"
    bound["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    created = report(policy, Request(bound, namespace="team", namespace_labels=SERVING, stage=Stage.STORED))
    assert {"node-name-set", "privileged-gpu"} <= set(rules(created)), "the stored pod is not clean"
    relabelled = copy.deepcopy(bound)
    relabelled["metadata"]["labels"]["pod-template-hash"] = "7d9c5b"
    decision = _update(policy, relabelled, bound)
    assert decision.allowed, [v.render() for v in decision.violations]
    assert "node-name-set" not in rules(decision) and "privileged-gpu" not in rules(decision)


def test_what_an_update_introduces_is_reported_next_to_what_it_keeps(policy):
    old = _stored(policy, pod(intent("inference", gpu_memory="4Gi"), [container()]))
    old["spec"]["nodeName"] = "gpu-node-1"
    new = copy.deepcopy(old)
    new["spec"]["containers"].append(container("debug", securityContext={"privileged": True}))
    decision = _update(policy, new, old)
    assert "privileged-gpu" in rules(decision)
    assert "node-name-set" not in rules(decision)


def test_an_update_that_worsens_a_finding_reports_it(policy):
    old = _stored(policy, pod(intent("training", gpus=8)), labels={"gpu-admission.io/tier": "training"})

    def asking(n: str) -> dict:  # the count and the intent together: apart, they are a conflict
        changed = copy.deepcopy(old)
        changed["metadata"]["annotations"]["gpu-admission.io/gpus"] = n
        changed["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = n
        return changed

    worse, old_bad, worst = asking("9"), asking("16"), asking("32")
    training = {"gpu-admission.io/tier": "training"}
    assert "gpu-count-exceeded" in rules(_update(policy, worse, old, labels=training))
    assert "gpu-count-exceeded" in rules(_update(policy, worst, old_bad, labels=training)), "16 -> 32 is worse"


# --- ephemeral containers ------------------------------------------------------------------------------


def _debugged(stored: dict, **security) -> dict:
    """What ``kubectl debug`` sends through pods/ephemeralcontainers: the whole Pod, one more container."""
    new = copy.deepcopy(stored)
    new["spec"]["ephemeralContainers"] = [
        {"name": "debugger-x7k2p", "image": "busybox:1.36", "targetContainerName": "main", "securityContext": security}
    ]
    return new


def test_a_privileged_ephemeral_container_on_a_mig_pod_is_denied(policy):
    stored = _stored(policy, pod(intent("inference", gpu_memory="4Gi"), [container()]))
    decision = _update(policy, _debugged(stored, privileged=True), stored)
    assert not decision.allowed
    found = [v for v in decision.violations if v.rule == "privileged-gpu"]
    assert found and found[0].path == "spec.ephemeralContainers[0].securityContext.privileged"


def test_an_unprivileged_ephemeral_container_is_admitted(policy):
    stored = _stored(policy, pod(intent("inference", gpu_memory="4Gi"), [container()]))
    decision = _update(policy, _debugged(stored), stored)
    assert decision.allowed, [v.render() for v in decision.violations]


def test_an_ephemeral_container_asking_the_toolkit_for_every_gpu_on_a_whole_gpu_pod_is_denied(policy):
    """Not only slices: a debug container with NVIDIA_VISIBLE_DEVICES=all on a training pod's node sees
    the cards other pods hold (privileged-gpu covers every pod that holds GPUs)."""
    training = {"gpu-admission.io/tier": "training"}
    stored = _stored(policy, pod(intent("training", gpus=4), [container()]), labels=training)
    new = copy.deepcopy(stored)
    new["spec"]["ephemeralContainers"] = [
        {"name": "dbg", "image": "cuda:12", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
    ]
    decision = _update(policy, new, stored, labels=training)
    found = [v for v in decision.violations if v.rule == "privileged-gpu"]
    assert not decision.allowed and [v.path for v in found] == ["spec.ephemeralContainers[0].env[0]"]
    assert _update(policy, copy.deepcopy(stored), stored, labels=training).allowed, "the pod itself is fine"


def test_a_class_label_on_a_daemonset_pod_bound_for_a_node_no_one_knows(providers):
    """The oracle's shrunk counterexample (providers policy, raw GPUs allowed): a DaemonSet-owned pod
    holding ``nvidia.com/gpu`` whose required affinity names node ``n2x`` of the HAMi pool, while the
    engine's Node objects hold other nodes of every pool but not ``n2x`` (it joined later). Its CREATE
    as a raw request is fine; the UPDATE that labels it class ``ts-plain`` makes it a class pod bound
    for a pool the class does not use. Judged by the known nodes alone it reached nothing and was
    admitted; a name no known node carries now keeps the pool model."""
    def node(name, pool):
        return {
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": f"{name}-host", "pool": pool}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}},
        }

    known = Cluster(nodes=(node("n1x", "hami"), node("n00x", "ts-plain"), node("n0x", "mig-single")))
    names = [{"key": "metadata.name", "operator": "In", "values": ["n2x"]}]
    old = pod(
        {
            "labels": {"app": "x"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "w", "uid": "u", "controller": True}
            ],
        },
        [container(limits={"nvidia.com/gpu": "1"})],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": names}]}
            }
        },
    )
    labels = {"gpu-admission.io/raw-gpus": "allowed"}
    created = report(
        providers, Request(old, namespace="team", namespace_labels=labels, cluster=known, stage=Stage.STORED)
    )
    assert created.allowed, [v.render() for v in created.denials]
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["gpu-admission.io/workload"] = "ts-plain"
    d = _update(providers, new, old, labels=labels, cluster=known)
    assert not d.allowed
    spoofed = {v.message.split("onto pool ")[1].split(",")[0] for v in d.denials if v.rule == "pool-spoofing"}
    assert "hami" in spoofed, [v.render() for v in d.denials]
