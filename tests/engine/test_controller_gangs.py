"""gang-required for apps controllers (Deployment, StatefulSet, ReplicaSet, DaemonSet) of a gang-required class.

Their pods are plain Pods copied from the template, and the webhook mutates those Pods, never the
controller: a gang is what the Pods will carry, i.e. the backend's pod-group keys on the template
(Volcano: also the owner's ``scheduling.volcano.sh/group-min-member``), or the gang intent from which
the webhook writes those keys on every Pod. The end-to-end tests build the Pod the controller would
create from the template (what the ReplicaSet / StatefulSet controller copies: the template's
metadata and spec) and send it through the engine as a Pod."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.conftest import CORPUS, POLICIES, TRAINING_NS, need_shared
from tests.engine.helpers import container, intent, rules, run, violation
from webhook.engine import Request, report
from webhook.policy import load_policy_texts

GPU8 = {"nvidia.com/gpu": "8"}
MIN_MEMBER = "scheduling.volcano.sh/group-min-member"
GROUP_NAME = "scheduling.k8s.io/group-name"


def controller(kind, meta=None, replicas=4, annotations=None, **spec):
    tpl_meta = copy.deepcopy(meta if meta is not None else intent("training", gpus=8))
    tpl_meta.setdefault("labels", {})["app"] = "ddp"
    obj = {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "ddp"},
        "spec": {
            "selector": {"matchLabels": {"app": "ddp"}},
            "template": {"metadata": tpl_meta, "spec": {"containers": [container("torch")], **spec}},
        },
    }
    if replicas is not None and kind != "DaemonSet":
        obj["spec"]["replicas"] = replicas
    if annotations:
        obj["metadata"]["annotations"] = dict(annotations)
    return obj


def pod_of(obj, index=0):
    """The Pod the controller creates from the template: its metadata and spec, copied."""
    tpl = obj["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{obj['metadata']['name']}-{index}", **copy.deepcopy(tpl["metadata"])},
        "spec": copy.deepcopy(tpl["spec"]),
    }


def variant(edit):
    doc = yaml.safe_load((POLICIES / "default.yaml").read_text(encoding="utf-8"))
    edit(doc["spec"])
    return load_policy_texts([("default.yaml", yaml.safe_dump(doc))])


APPS = ["Deployment", "StatefulSet", "ReplicaSet"]


@pytest.mark.parametrize("kind", APPS)
def test_a_training_controller_with_several_replicas_needs_a_gang(policy, kind):
    d = run(policy, controller(kind), training=True)
    v = violation(d, "gang-required")
    assert not d.allowed and v.path == "spec.template.metadata.labels[gpu-admission.io/workload]"
    assert v.message.startswith("4 pods of class 'training' must start together")
    assert f'annotate the {kind} with {MIN_MEMBER}: "4"' in v.message
    assert GROUP_NAME in v.message and "gpu-admission.io/gang-size: 4" in v.message


@pytest.mark.parametrize("kind", APPS)
@pytest.mark.parametrize("replicas", [None, 1])
def test_one_pod_needs_no_gang(policy, kind, replicas):
    d = run(policy, controller(kind, replicas=replicas), training=True)
    assert "gang-required" not in rules(d), [v.render() for v in d.violations]


@pytest.mark.parametrize("kind", APPS)
def test_volcanos_owner_annotation_with_the_volcano_scheduler_is_a_gang(policy, kind):
    obj = controller(kind, annotations={MIN_MEMBER: "4"}, schedulerName="volcano")
    d = run(policy, obj, training=True)
    assert d.allowed and not ({"gang-required", "gang-incomplete"} & set(rules(d))), [
        v.render() for v in d.violations
    ]


def test_the_owner_annotation_must_count_every_replica(policy):
    d = run(policy, controller("StatefulSet", annotations={MIN_MEMBER: "2"}, schedulerName="volcano"), training=True)
    v = violation(d, "gang-incomplete")
    assert v.path == f"metadata.annotations[{MIN_MEMBER}]" and 'set it to "4"' in v.message


def test_a_volcano_group_without_the_volcano_scheduler_is_no_gang(policy):
    meta = intent("training", gpus=8)
    meta["annotations"][GROUP_NAME] = "ddp-pg"
    d = run(policy, controller("StatefulSet", meta), training=True)
    assert "spec.template.spec.schedulerName is not set, not 'volcano'" in violation(d, "gang-required").message
    ok = run(policy, controller("StatefulSet", meta, schedulerName="volcano"), training=True)
    assert "gang-required" not in rules(ok)


def test_the_gang_intent_is_a_gang_and_the_pods_carry_it(policy):
    meta = intent("training", gpus=8, gang="ddp", gang_size=4)
    obj = controller("StatefulSet", meta)
    d = run(policy, obj, training=True)
    assert d.allowed, [v.render() for v in d.violations]
    # the StatefulSet controller's Pod, mutated by the webhook as a Pod, is in the Volcano gang
    p = run(policy, pod_of(obj), training=True)
    assert p.allowed, [v.render() for v in p.violations]
    assert p.mutated["metadata"]["annotations"][GROUP_NAME] == "ddp"
    assert p.mutated["spec"]["schedulerName"] == "volcano"


def test_a_gang_intent_smaller_than_the_replicas_is_incomplete(policy):
    meta = intent("training", gpus=8, gang="ddp", gang_size=2)
    d = run(policy, controller("Deployment", meta), training=True)
    assert "gang-size 2 does not match the 4 pods" in violation(d, "gang-incomplete").message


def test_scaling_a_statefulset_up_on_update_needs_the_gang(policy):
    old = controller("StatefulSet", replicas=1)
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 4
    d = report(
        policy, Request(new, operation="UPDATE", old_object=old, namespace="team-a", namespace_labels=TRAINING_NS)
    )
    assert "gang-required" in rules(d) and not d.allowed


def test_a_class_without_a_required_gang_is_not_judged(policy):
    d = run(policy, controller("Deployment", intent("inference", gpu_memory="4Gi")), training=True)
    assert "gang-required" not in rules(d)


# --- DaemonSets: one pod per node ---------------------------------------------------------------------------


def test_a_training_daemonset_needs_a_gang_of_the_pools_nodes(policy):
    d = run(policy, controller("DaemonSet"), training=True)
    v = violation(d, "gang-required")
    assert "one per node of pool train-h100, 16 nodes" in v.message and f'{MIN_MEMBER}: "16"' in v.message
    ok = run(policy, controller("DaemonSet", annotations={MIN_MEMBER: "16"}, schedulerName="volcano"), training=True)
    assert not ({"gang-required", "gang-incomplete"} & set(rules(ok))), [v.render() for v in ok.violations]
    short = run(policy, controller("DaemonSet", annotations={MIN_MEMBER: "8"}, schedulerName="volcano"), training=True)
    assert "!= the 16 nodes of its pool" in violation(short, "gang-incomplete").message


def test_a_daemonset_on_a_one_node_pool_or_a_pool_of_unknown_size():
    one = variant(lambda s: s["pools"]["train-h100"].update(nodes=1))
    assert "gang-required" not in rules(run(one, controller("DaemonSet"), training=True))
    unknown = variant(lambda s: s["pools"]["train-h100"].pop("nodes"))
    d = run(unknown, controller("DaemonSet"), training=True)
    assert "one per node of pool train-h100;" in violation(d, "gang-required").message
    ok = run(unknown, controller("DaemonSet", annotations={MIN_MEMBER: "3"}, schedulerName="volcano"), training=True)
    assert not ({"gang-required", "gang-incomplete"} & set(rules(ok)))


# --- other backends -----------------------------------------------------------------------------------------


def test_kueue_pod_group_keys_on_the_template():
    pol = variant(lambda s: s["classes"]["training"].update(gang={"backend": "kueue", "required": True},
                                                            kueueQueue="train-q"))
    d = run(pol, controller("StatefulSet"), training=True)
    assert "label the pod template kueue.x-k8s.io/pod-group-name" in violation(d, "gang-required").message
    meta = intent("training", gpus=8)
    meta["labels"]["kueue.x-k8s.io/pod-group-name"] = "ddp"
    meta["annotations"]["kueue.x-k8s.io/pod-group-total-count"] = "4"
    ok = run(pol, controller("StatefulSet", meta), training=True)
    assert not ({"gang-required", "gang-incomplete"} & set(rules(ok))), [v.render() for v in ok.violations]
    meta["annotations"]["kueue.x-k8s.io/pod-group-total-count"] = "3"
    short = run(pol, controller("StatefulSet", meta), training=True)
    v = violation(short, "gang-incomplete")
    assert v.path == "spec.template.metadata.annotations[kueue.x-k8s.io/pod-group-total-count]"


def test_coscheduling_pod_group_label_and_scheduler():
    pol = variant(
        lambda s: s["classes"]["training"].update(
            gang={"backend": "coscheduling", "required": True, "schedulerName": "scheduler-plugins-scheduler"}
        )
    )
    meta = intent("training", gpus=8)
    meta["labels"]["scheduling.x-k8s.io/pod-group"] = "ddp"
    d = run(pol, controller("Deployment", meta), training=True)
    assert "is not set, not 'scheduler-plugins-scheduler'" in violation(d, "gang-required").message
    ok = run(pol, controller("Deployment", meta, schedulerName="scheduler-plugins-scheduler"), training=True)
    assert "gang-required" not in rules(ok), [v.render() for v in ok.violations]


# --- a real manifest ----------------------------------------------------------------------------------------


def test_the_gpu_operators_five_replica_deployment_as_training(policy):
    """gpu-operator's plugin-test Deployment (5 x nvidia.com/gpu: 1), labelled as training: denied
    until its pods join a Volcano gang."""
    obj = yaml.safe_load(need_shared(CORPUS / "gpu-operator" / "plugin-test.yaml").read_text(encoding="utf-8"))
    tpl = obj["spec"]["template"]
    tpl["metadata"]["labels"]["gpu-admission.io/workload"] = "training"
    del tpl["spec"]["nodeSelector"]  # a T4 product label: not a pool of the default policy
    d = run(policy, obj, training=True)
    assert violation(d, "gang-required").message.startswith("5 pods of class 'training'")
    obj["metadata"]["annotations"] = {MIN_MEMBER: "5"}
    tpl["spec"]["schedulerName"] = "volcano"
    ok = run(policy, obj, training=True)
    assert ok.allowed, [v.render() for v in ok.violations]
