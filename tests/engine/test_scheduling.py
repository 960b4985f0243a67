"""scheduling-not-allowed: what a user with permission to create Pods or workloads in one namespace can
write in priorityClassName / schedulerName to preempt others or to leave the platform's scheduler.

Each attack is admitted the way the apiserver runs admission: ``/mutate`` (patch applied with jsonpatch),
then ``/validate`` on the stored object (``as_received``). UPDATEs are judged as stored, against the
object admission stored before."""

from __future__ import annotations

import copy

import jsonpatch
import pytest
import yaml

from tests.conftest import POLICIES, SERVING_NS, TRAINING_NS
from tests.engine.helpers import container, intent, job, pod, rules, vcjob, violation
from webhook.engine import Request, Stage, mutate, report
from webhook.policy import load_policy_texts

GPU1 = {"nvidia.com/gpu": "1"}
RULE = "scheduling-not-allowed"


def admit(policy, obj, labels=SERVING_NS, namespace="team-a"):
    m = mutate(policy, Request(obj, namespace=namespace, namespace_labels=labels))
    stored = jsonpatch.apply_patch(copy.deepcopy(obj), list(m.patch)) if m.patch else copy.deepcopy(obj)
    return report(policy, Request(stored, namespace=namespace, namespace_labels=labels, stage=Stage.STORED)), stored


def update(policy, new, old, labels=SERVING_NS):
    return report(
        policy,
        Request(
            new, operation="UPDATE", old_object=old, namespace="team-a", namespace_labels=labels, stage=Stage.STORED
        ),
    )


def variant(edit) -> object:
    """The shipped default policy with ``edit(spec)`` applied: real YAML through the real loader."""
    doc = yaml.safe_load((POLICIES / "default.yaml").read_text(encoding="utf-8"))
    edit(doc["spec"])
    return load_policy_texts([("default.yaml", yaml.safe_dump(doc))])


def deployment(meta, containers=None, replicas=2, **spec):
    labels = {"app": "x", **(meta.get("labels") or {})}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "svc"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "x"}},
            "template": {
                "metadata": {**copy.deepcopy(meta), "labels": labels},
                "spec": {"containers": containers or [container()], **spec},
            },
        },
    }


def pytorchjob(worker_spec=None, run_policy=None, workers=2):
    tpl = {
        "metadata": intent("training", gpus=8),
        "spec": {"containers": [container("pytorch")], **(worker_spec or {})},
    }
    obj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ddp"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": copy.deepcopy(tpl)},
                "Worker": {"replicas": workers, "template": tpl},
            }
        },
    }
    if run_policy is not None:
        obj["spec"]["runPolicy"] = run_policy
    return obj


# --- attacks ------------------------------------------------------------------------------------------------


def test_a_batch_job_template_naming_the_inference_priority_is_denied(policy):
    d, _ = admit(policy, job(intent("batch", gpu_memory="10Gi"), parallelism=1, priorityClassName="gpu-inference"))
    v = violation(d, RULE)
    assert v.path == "spec.template.spec.priorityClassName" and not d.allowed
    assert "'gpu-inference'" in v.message and "allowed: gpu-batch-preemptible" in v.message
    assert "classes.batch.allowedPriorityClasses" in v.message


def test_a_pytorchjob_worker_template_naming_another_scheduler_is_denied(policy):
    d, _ = admit(policy, pytorchjob({"schedulerName": "my-scheduler"}), labels=TRAINING_NS)
    paths = {v.path for v in d.violations if v.rule == RULE}
    assert "spec.pytorchReplicaSpecs.Worker.template.spec.schedulerName" in paths
    assert "spec.pytorchReplicaSpecs.Master.template.spec.schedulerName" in paths
    assert "allowed: default-scheduler, volcano" in violation(d, RULE).message


def test_a_pytorchjob_gang_priority_is_judged_like_a_pods(policy):
    """runPolicy.schedulingPolicy.priorityClass becomes the PodGroup's priority: Volcano orders and
    preempts whole gangs by it."""
    d, _ = admit(policy, pytorchjob(run_policy={"schedulingPolicy": {"priorityClass": "gpu-inference"}}), TRAINING_NS)
    v = violation(d, RULE)
    assert v.path == "spec.runPolicy.schedulingPolicy.priorityClass" and not d.allowed


def test_a_deployment_template_with_system_cluster_critical_is_denied(policy):
    d = report(
        policy,
        Request(
            deployment(intent("inference", gpu_memory="4Gi"), priorityClassName="system-cluster-critical"),
            namespace="team-a",
            namespace_labels=SERVING_NS,
        ),
    )
    v = violation(d, RULE)
    assert v.path == "spec.template.spec.priorityClassName" and "reserved for cluster-critical" in v.message


def test_a_raw_gpu_pod_may_not_name_a_priority_or_scheduler_its_namespace_rule_does_not_list(policy):
    for spec, part in (
        ({"priorityClassName": "gpu-training"}, "gpu-training"),
        ({"schedulerName": "kai-scheduler"}, "kai"),
    ):
        d, _ = admit(policy, pod({}, [container(limits=GPU1)], **spec), labels={})
        v = violation(d, RULE)
        assert part in v.message and "namespace rule 'everyone-else'" in v.message and not d.allowed


def test_a_volcano_job_priority_is_judged_and_an_update_cannot_raise_it(policy):
    """Volcano gives the job's PodGroup spec.priorityClassName, and lets an UPDATE change it."""
    d, _ = admit(policy, vcjob(intent("batch", gpu_memory="10Gi"), replicas=1, min_available=1), SERVING_NS)
    assert RULE not in rules(d), [v.render() for v in d.violations]
    stored = copy.deepcopy(d.mutated)
    raised = copy.deepcopy(stored)
    raised["spec"]["priorityClassName"] = "gpu-inference"
    u = update(policy, raised, stored)
    assert violation(u, RULE).path == "spec.priorityClassName" and not u.allowed


def test_system_critical_is_denied_even_when_an_allow_list_names_it():
    pol = variant(lambda s: s["classes"]["batch"].update(allowedPriorityClasses=["system-node-critical"]))
    d, _ = admit(pol, pod(intent("batch", gpu_memory="10Gi"), priorityClassName="system-node-critical"))
    assert "reserved for cluster-critical" in violation(d, RULE).message


def test_a_cpu_pod_with_system_critical_is_not_judged(policy):
    d, _ = admit(policy, pod({}, priorityClassName="system-node-critical"))
    assert not d.relevant


def test_updating_a_deployment_template_to_escalate_is_denied_and_an_old_value_is_not_news(policy):
    old = deployment(intent("batch", gpu_memory="10Gi"))
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["priorityClassName"] = "gpu-inference"
    u = update(policy, new, old)
    assert violation(u, RULE).path == "spec.template.spec.priorityClassName" and not u.allowed
    scaled = copy.deepcopy(new)
    scaled["spec"]["replicas"] = 3
    assert RULE not in rules(update(policy, scaled, new))


def test_a_class_stored_with_the_default_scheduler_when_it_requires_another_is_denied():
    """The mutation sets the class's schedulerName; stored with default-scheduler means it failed open
    (or a later webhook undid it), and the pods would skip the class's scheduler."""
    pol = variant(lambda s: s["classes"]["dev"].update(schedulerName="kai-scheduler"))
    obj = pod(intent("dev", gpu_memory="4Gi"), schedulerName="default-scheduler")
    mutated, _ = admit(pol, obj, labels={})
    assert mutated.allowed and RULE not in rules(mutated)  # our mutation replaced it
    stored = report(pol, Request(obj, namespace="team-a", namespace_labels={}, stage=Stage.STORED))
    assert "is scheduled by 'kai-scheduler'" in violation(stored, RULE).message


# --- what is allowed ------------------------------------------------------------------------------------------


def test_the_class_own_values_and_its_gang_scheduler_pass(policy):
    for obj, labels in (
        (pod(intent("batch", gpu_memory="10Gi"), priorityClassName="gpu-batch-preemptible"), SERVING_NS),
        (pod(intent("batch", gpu_memory="10Gi"), schedulerName="default-scheduler"), SERVING_NS),
        (job(intent("training", gpus=8), priorityClassName="gpu-training", schedulerName="volcano"), TRAINING_NS),
        (pytorchjob(), TRAINING_NS),
        (vcjob(intent("training", gpus=8)), TRAINING_NS),
    ):
        d, _ = admit(policy, obj, labels)
        assert RULE not in rules(d), [v.render() for v in d.violations]


def test_a_volcano_job_of_a_class_without_a_gang_may_keep_volcano(policy):
    """Volcano's own webhook sets spec.schedulerName: volcano on every Volcano Job before /validate."""
    obj = vcjob(intent("batch", gpu_memory="10Gi"), replicas=1, min_available=1)
    obj["spec"]["schedulerName"] = "volcano"
    obj["spec"]["tasks"][0]["template"]["spec"]["schedulerName"] = "volcano"
    d, _ = admit(policy, obj)
    assert RULE not in rules(d), [v.render() for v in d.violations]


def test_class_allow_lists_extend_what_a_class_may_set():
    def edit(spec):
        spec["classes"]["training"].update(allowedSchedulers=["kai-scheduler"])
        spec["classes"]["batch"].update(allowedPriorityClasses=["gpu-dev"])

    pol = variant(edit)
    d, _ = admit(pol, pod(intent("training", gpus=8), schedulerName="kai-scheduler"), labels=TRAINING_NS)
    assert RULE not in rules(d)
    d, _ = admit(pol, pod(intent("batch", gpu_memory="10Gi"), priorityClassName="gpu-dev"))
    assert RULE not in rules(d)
    d, _ = admit(pol, pod(intent("batch", gpu_memory="10Gi"), priorityClassName="gpu-training"))
    assert "allowed: gpu-batch-preemptible, gpu-dev" in violation(d, RULE).message


def test_an_entitlement_allow_list_lets_raw_requests_of_its_namespaces_set_them():
    def edit(spec):
        spec["namespaces"].insert(
            0,
            {
                "name": "research",
                "selector": {"matchLabels": {"team": "research"}},
                "classes": ["inference", "batch"],
                "allowedPriorityClasses": ["gpu-batch-preemptible"],
                "allowedSchedulers": ["kai-scheduler"],
            },
        )

    pol = variant(edit)
    research = {"team": "research"}
    ok = pod({}, [container(limits={"nvidia.com/mig-1g.5gb": "1"})], priorityClassName="gpu-batch-preemptible",
             schedulerName="kai-scheduler")
    d, _ = admit(pol, ok, labels=research)
    assert RULE not in rules(d), [v.render() for v in d.violations]
    d, _ = admit(pol, ok, labels={})  # another namespace: its rule lists nothing
    assert RULE in rules(d)
    bad = pod({}, [container(limits={"nvidia.com/mig-1g.5gb": "1"})], priorityClassName="gpu-inference")
    d, _ = admit(pol, bad, labels=research)
    assert "allowed: gpu-batch-preemptible" in violation(d, RULE).message


def test_an_exempt_namespace_may_run_system_critical_gpu_pods():
    pol = variant(lambda s: s["rules"].update({RULE: {"exempt": [{"matchLabels": {"platform/system": "true"}}]}}))
    critical = pod({}, [container(limits=GPU1)], priorityClassName="system-node-critical")
    d, _ = admit(pol, critical, labels={"platform/system": "true"})
    assert RULE not in rules(d)
    d, _ = admit(pol, critical, labels={})
    assert RULE in rules(d)


@pytest.mark.parametrize("action", ["warn", "audit"])
def test_the_action_is_the_policys(action):
    pol = variant(lambda s: s["rules"].update({RULE: {"action": action}}))
    d, _ = admit(pol, pod(intent("batch", gpu_memory="10Gi"), priorityClassName="gpu-inference"))
    assert d.allowed and violation(d, RULE).action.value == action


def test_a_raw_request_for_volcano_vgpu_devices_may_name_volcano(policy):
    """Only the Volcano scheduler accounts for volcano.sh/vgpu-* (and the older volcano.sh/gpu-*) devices."""
    vgpu = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "4096"}
    d, _ = admit(policy, pod({}, [container(limits=vgpu)], schedulerName="volcano"), labels={})
    assert RULE not in rules(d), [v.render() for v in d.violations]
    d, _ = admit(policy, pod({}, [container(limits=GPU1)], schedulerName="volcano"), labels={})
    assert RULE in rules(d)
