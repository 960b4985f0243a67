"""A class object's own GPU count is its intent: never shrunk or grown silently.

A ``training`` pod that writes ``nvidia.com/gpu: 16`` and no ``gpu-admission.io/gpus`` asked for 16 GPUs.
Translating it to the class default of one GPU would admit a different workload than the user wrote
(and hide that the class allows 8): the count written in the GPU container's resources is read as the
``gpus`` intent, judged against the class and the pool, and a ``gpus`` annotation that says otherwise
is a conflict the user must settle.
"""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from tests.conftest import TRAINING_NS
from tests.engine.helpers import container, intent, job, limits, pod, rules, run, violation
from tests.engine.test_kinds import TRAIN, pytorchjob
from webhook.engine import Request, Stage, mutate, report

TRAINING = {"labels": {"gpu-admission.io/workload": "training"}}


def _written(n: int | str, requests: bool = False) -> dict:
    value = str(n)
    return container("main", limits={"nvidia.com/gpu": value}, requests={"nvidia.com/gpu": value} if requests else None)


def test_a_training_pod_asking_for_16_gpus_is_judged_as_16_not_admitted_with_1(policy):
    d = run(policy, pod(intent("training"), [_written(16)]), training=True)
    assert "gpu-count-exceeded" in rules(d), [v.render() for v in d.violations]
    v = violation(d, "gpu-count-exceeded")
    assert "16" in v.message
    assert not d.allowed


def test_a_training_pod_keeps_the_count_it_wrote(policy):
    d = run(policy, pod(intent("training"), [_written(4, requests=True)]), training=True)
    assert d.allowed, [v.render() for v in d.violations]
    assert limits(d.mutated)["nvidia.com/gpu"] == "4"
    assert d.mutated["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "4"


def test_a_training_job_keeps_the_count_it_wrote_and_is_judged_by_it(policy):
    d = run(policy, job(intent("training"), [_written(4)], parallelism=1), training=True)
    assert d.allowed, [v.render() for v in d.violations]
    assert limits(d.mutated)["nvidia.com/gpu"] == "4"
    over = run(policy, job(intent("training"), [_written(16)], parallelism=1), training=True)
    assert "gpu-count-exceeded" in rules(over)


def test_a_trainjob_resources_per_node_count_is_its_intent(policy):
    obj = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "t", "labels": TRAIN["labels"]},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "16"}}},
        },
    }
    d = run(policy, obj, training=True)
    assert "gpu-count-exceeded" in rules(d), [v.render() for v in d.violations]
    fits = copy.deepcopy(obj)
    fits["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] = "4"
    ok = run(policy, fits, training=True)
    assert "gpu-count-exceeded" not in rules(ok)
    assert ok.mutated is not None
    assert ok.mutated["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "4"


def test_a_pytorchjob_worker_count_is_its_intent(policy):
    obj = pytorchjob(meta=TRAINING)
    for spec in obj["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "16"}}
    d = run(policy, obj, training=True)
    assert "gpu-count-exceeded" in rules(d), [v.render() for v in d.violations]
    for spec in obj["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
    ok = run(policy, obj, training=True)
    assert "gpu-count-exceeded" not in rules(ok)
    worker = ok.mutated["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "2"


@pytest.mark.parametrize("written", ["16", "2"])
def test_a_gpus_annotation_that_disagrees_with_the_written_count_is_denied_with_the_fix(policy, written):
    d = run(policy, pod(intent("training", gpus=4), [_written(written)]), training=True)
    v = violation(d, "intent-invalid")
    assert v.path == "spec.containers[0].resources.limits[nvidia.com/gpu]"
    assert "gpu-admission.io/gpus" in v.message and written in v.message and "4" in v.message
    assert "remove" in v.message
    assert not d.allowed


def test_an_agreeing_annotation_and_count_are_admitted(policy):
    d = run(policy, pod(intent("training", gpus=4), [_written(4)]), training=True)
    assert "intent-invalid" not in rules(d)
    assert limits(d.mutated)["nvidia.com/gpu"] == "4"


def test_the_stored_pod_is_judged_by_the_count_it_holds(policy):
    """At /validate the stored pod is what the apiserver keeps: 16 GPUs there is 16, not the default 1."""
    d = run(policy, pod(intent("training"), [_written(16)]), training=True, stage=Stage.STORED)
    assert "gpu-count-exceeded" in rules(d)


def test_a_conflict_survives_the_webhook_flow_mutate_then_validate(policy):
    """/mutate must not settle the conflict by rewriting the count: /validate would then see a pod that
    agrees with itself and admit 4 GPUs the user never wrote."""
    obj = pod(intent("training", gpus=4), [_written(16)])
    patched = mutate(policy, Request(copy.deepcopy(obj), namespace="team-a", namespace_labels=TRAINING_NS))
    stored = jsonpatch.apply_patch(obj, list(patched.patch)) if patched.patch else obj
    assert stored["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "16"
    d = report(policy, Request(stored, namespace="team-a", namespace_labels=TRAINING_NS, stage=Stage.STORED))
    assert "intent-invalid" in rules(d) and not d.allowed


def test_several_whole_gpus_on_a_mig_class_are_denied_with_the_isolation_fix(policy):
    d = run(policy, pod(intent("inference", gpu_memory="4Gi"), [_written(2)]), training=True)
    v = violation(d, "intent-invalid")
    assert v.path == "spec.containers[0].resources.limits[nvidia.com/gpu]"
    assert "isolation: exclusive" in v.message and "isolation mig" in v.message
    one = run(policy, pod(intent("inference", gpu_memory="4Gi"), [_written(1)]), training=True)
    assert one.allowed and limits(one.mutated) == {"nvidia.com/mig-1g.5gb": "1"}
