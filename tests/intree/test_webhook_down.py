"""With the webhook unreachable, the in-tree policies deny what matters, as the engine does.

The apiserver is emulated (``tests/intree/apiserver.py``, cel-python for cel-go; no apiserver runs here)
and stores objects as it would (``tests/intree/stored.py``). Each case is the object as stored with the
mutating webhook down, judged by the rendered in-tree policies *and* by the engine's validating view on
the same object: the in-tree denial must name the rule and the engine must deny too. And the same
objects after the webhook's own mutation are admitted by both (the in-tree policies run while the
webhook is up as well).
"""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from tests.intree.apiserver import ALLOW, DENY, InTree, Request
from tests.intree.conftest import in_tree, policy_named
from tests.intree.stored import default_pod_spec, defaulted, stored
from webhook import engine

KEY = "gpu-admission.io/workload"
SERVING = {"gpu-admission.io/tier": "serving"}
SANDBOX = {"gpu-admission.io/tier": "sandbox"}
POD = ("", "v1", "pods")


def pod(labels=None, annotations=None, limits=None, **spec):
    container = {"name": "c", "image": "registry/app:1", "resources": {"limits": limits or {"cpu": "1"}}}
    meta = {"name": "p", "labels": labels or {}, "annotations": annotations or {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container], **spec}}


def judge(obj, labels=None, policy="default", namespace="team-a", operation="CREATE", old=None, resource=POD, sub=""):
    p = policy_named(policy)
    labels = {"kubernetes.io/metadata.name": namespace, **(labels or {})}
    verdict = InTree(list(in_tree(policy))).review(Request(obj, old, operation, resource, namespace, labels, sub))
    decision = engine.report(
        p,
        engine.Request(
            obj,
            operation=operation,
            old_object=old,
            namespace=namespace,
            namespace_labels=labels,
            stage=engine.Stage.STORED,
        ),
    )
    assert not verdict.errors, verdict.errors
    return verdict, decision


def down(obj, labels=None, **kw):
    """Stored with the webhook down: defaulted and the apiserver's plugins, not mutated."""
    return judge(stored(obj, "team-a", policy_named(kw.get("policy", "default"))), labels, **kw)


def up(obj, labels=None, policy="default", resource=POD):
    """Stored with the webhook up: its /mutate patch applied, re-defaulted."""
    p = policy_named(policy)
    full = {"kubernetes.io/metadata.name": "team-a", **(labels or {})}
    raw = stored(obj, "team-a", p)
    m = engine.mutate(p, engine.Request(raw, namespace="team-a", namespace_labels=full))
    mutated = defaulted(jsonpatch.apply_patch(raw, list(m.patch)), "team-a") if m.patch else raw
    if mutated["kind"] == "Pod":
        default_pod_spec(mutated["spec"], pod=True)
    return judge(mutated, labels, policy=policy, resource=resource)


def denied_by(verdict, decision, rule):
    assert verdict.decision == DENY, "the in-tree policies admitted it"
    assert any(m.startswith(f"[{rule}] ") for m in verdict.messages), verdict.messages
    assert not decision.allowed, "the engine admits what the in-tree policies deny"


CASES = {
    "class pod stored unmutated": (
        pod({KEY: "inference"}, {"gpu-admission.io/gpu-memory": "4Gi"}),
        {},
        "placement-missing",
    ),
    "training class in a serving namespace": (pod({KEY: "training"}), SERVING, "class-not-allowed"),
    "unknown class": (pod({KEY: "trainig"}), {}, "intent-invalid"),
    "malformed gpus": (pod({KEY: "training"}, {"gpu-admission.io/gpus": "eight"}), {}, "intent-invalid"),
    "raw GPUs, blanket toleration, serving namespace": (
        pod(limits={"nvidia.com/gpu": "8"}, tolerations=[{"operator": "Exists"}]),
        SERVING,
        "pool-spoofing",
    ),
    "raw GPUs with the training pool's taint toleration": (
        pod(
            limits={"nvidia.com/gpu": "8"},
            tolerations=[{"key": "workload", "operator": "Equal", "value": "gpu-train", "effect": "NoSchedule"}],
        ),
        SERVING,
        "pool-spoofing",
    ),
    "raw GPUs selecting the training pool": (
        pod(limits={"nvidia.com/gpu": "1"}, nodeSelector={"workload": "gpu-train"}),
        SANDBOX,
        "pool-spoofing",
    ),
    "privileged GPU pod": (pod(limits={"nvidia.com/gpu": "1"}), {}, "privileged-gpu"),
    "NVIDIA_VISIBLE_DEVICES=all": (pod({KEY: "training"}), {}, "privileged-gpu"),
    "hostPath /dev": (
        pod(limits={"nvidia.com/gpu": "1"}, volumes=[{"name": "d", "hostPath": {"path": "/dev"}}]),
        {},
        "privileged-gpu",
    ),
    "nodeName on a GPU pod": (pod(limits={"nvidia.com/gpu": "1"}, nodeName="h100-node-03"), {}, "node-name-set"),
    "system-node-critical GPU pod": (
        pod(limits={"nvidia.com/gpu": "1"}, priorityClassName="system-node-critical"),
        {},
        "scheduling-not-allowed",
    ),
    "batch pod naming the inference priority": (
        pod({KEY: "batch"}, priorityClassName="gpu-inference"),
        {},
        "scheduling-not-allowed",
    ),
    "class pod naming a foreign scheduler": (
        pod({KEY: "dev"}, schedulerName="my-scheduler"),
        {},
        "scheduling-not-allowed",
    ),
    "inference pod with 16 GPUs": (
        pod({KEY: "inference"}, {"gpu-admission.io/isolation": "exclusive"}, limits={"nvidia.com/gpu": "16"}),
        {},
        "gpu-count-exceeded",
    ),
}
CASES["privileged GPU pod"][0]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
CASES["NVIDIA_VISIBLE_DEVICES=all"][0]["spec"]["containers"][0]["env"] = [
    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}
]
CASES["hostPath /dev"][0]["spec"]["containers"][0]["volumeMounts"] = [{"name": "d", "mountPath": "/host-dev"}]


@pytest.mark.parametrize("case", sorted(CASES))
def test_webhook_down_denies_with_the_rule(case):
    obj, labels, rule = CASES[case]
    denied_by(*down(copy.deepcopy(obj), labels), rule)


def test_placement_missing_says_retry():
    verdict, _ = down(pod({KEY: "inference"}))
    assert any("webhook unavailable, retry" in m for m in verdict.messages)


@pytest.mark.parametrize("cls", ["inference", "batch", "dev", "training"])
def test_every_class_pod_the_webhook_placed_is_admitted(cls):
    verdict, decision = up(pod({KEY: cls}))
    assert decision.allowed and verdict.decision == ALLOW, verdict.messages


def test_a_controller_is_never_held_to_placement():
    """A Deployment's template is not placed (its pods are, at their CREATE): the in-tree policies must admit
    it as the engine does."""
    tpl = pod({KEY: "inference"})
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": tpl["metadata"], "spec": tpl["spec"]},
        },
    }
    verdict, decision = down(deploy, resource=("apps", "v1", "deployments"))
    assert decision.allowed and verdict.decision == ALLOW, verdict.messages
    deploy["spec"]["template"]["metadata"]["labels"][KEY] = "training"
    denied_by(*down(deploy, SERVING, resource=("apps", "v1", "deployments")), "class-not-allowed")


def test_a_bound_pod_keeps_its_node_name_on_update():
    """node-name-set on UPDATE only when newly set: relabelling a bound GPU pod is not a violation."""
    old = stored(pod(limits={"nvidia.com/gpu": "1"}, nodeName="n1"), "team-a", policy_named("default"))
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["team"] = "x"
    verdict, decision = judge(new, operation="UPDATE", old=old)
    assert verdict.decision == ALLOW, verdict.messages
    assert not [v for v in decision.violations if v.rule == "node-name-set"]


def test_kubectl_debug_privileged_ephemeral_container_on_a_gpu_pod():
    old = stored(pod({KEY: "training"}), "team-a", policy_named("default"))
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [
        {"name": "debug", "image": "busybox", "securityContext": {"privileged": True}}
    ]
    denied_by(*judge(new, operation="UPDATE", old=old, sub="ephemeralcontainers"), "privileged-gpu")


def test_exempt_namespaces_are_never_judged():
    obj = stored(pod({KEY: "training"}), "kube-system", policy_named("default"))
    verdict, _ = judge(obj, SERVING, namespace="kube-system")
    assert verdict.decision == ALLOW


def test_per_namespace_warn_is_a_warning_not_a_denial():
    """The variant policy warns node-name-set in serving namespaces: a Warn binding, no denial."""
    obj = stored(pod(limits={"nvidia.com/gpu": "1"}, nodeName="n1"), "team-a", policy_named("variant"))
    verdict, decision = judge(obj, SERVING, policy="variant")
    assert any(w.startswith("[node-name-set]") for w in verdict.warnings)
    assert not any(m.startswith("[node-name-set]") for m in verdict.messages)
    assert {v.action.value for v in decision.violations if v.rule == "node-name-set"} == {"warn"}


def test_an_exempt_namespace_skips_only_the_exempted_rule():
    """The variant exempts sandbox namespaces from class-not-allowed: a training pod there passes that rule."""
    obj = stored(pod({KEY: "training"}), "team-a", policy_named("variant"))
    verdict, _ = judge(obj, SANDBOX, policy="variant")
    assert not any(m.startswith("[class-not-allowed]") for m in verdict.messages)
    verdict, _ = judge(obj, SERVING, policy="variant")
    assert any(m.startswith("[class-not-allowed]") for m in verdict.messages)


def volcano_job(task_min=None, replicas=4, cls="training"):
    task = {
        "name": "worker",
        "replicas": replicas,
        "template": {
            "metadata": {"labels": {KEY: cls}},
            "spec": {"containers": [{"name": "w", "image": "t:1"}], "restartPolicy": "Never"},
        },
    }
    if task_min is not None:
        task["minAvailable"] = task_min
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {"minAvailable": replicas, "tasks": [task]},
    }


VCJOB = ("batch.volcano.sh", "v1alpha1", "jobs")


def test_a_volcano_task_below_its_replicas_is_gang_incomplete():
    denied_by(*down(volcano_job(task_min=2), resource=VCJOB), "gang-incomplete")
    verdict, decision = up(volcano_job(task_min=4), resource=VCJOB)
    assert not any(m.startswith("[gang-incomplete]") for m in verdict.messages)
    assert not [v for v in decision.violations if v.rule == "gang-incomplete"]


# --- gang-required (tests/intree/policies/gangs.yaml: one gang-required class per backend) ---------------

JOB = ("batch", "v1", "jobs")
LENIENT = {"gpu-admission.io/tier": "lenient"}


def batch_job(cls, parallelism=4, completions=None, annotations=None, labels=None, name="train"):
    spec = {
        "template": {
            "metadata": {"labels": {KEY: cls}},
            "spec": {"containers": [{"name": "w", "image": "t:1"}], "restartPolicy": "Never"},
        },
    }
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    meta = {"name": name, "annotations": annotations or {}, "labels": labels or {}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


GANG_CASES = {
    "volcano: no group-min-member": batch_job("volcano-train"),
    "kueue: no queue-name label": batch_job("kueue-train"),
    "coscheduling: no pod-group label": batch_job("cosched-train"),
    "kai: no batch-min-member": batch_job("kai-train"),
    "no backend at all": batch_job("lone-train", parallelism=2),
    "completions above parallelism": batch_job("volcano-train", parallelism=3, completions=10),
}


@pytest.mark.parametrize("case", sorted(GANG_CASES))
def test_a_multi_pod_job_stored_without_its_gang_is_gang_required(case):
    denied_by(*down(copy.deepcopy(GANG_CASES[case]), policy="gangs", resource=JOB), "gang-required")


GANG_ADMITTED = {
    "one pod": batch_job("volcano-train", parallelism=1),
    "parallelism capped to one by completions": batch_job("volcano-train", parallelism=4, completions=1),
    "a class that does not require a gang": batch_job("loose"),
    "the gang spelled by the user": batch_job(
        "volcano-train", annotations={"scheduling.volcano.sh/group-min-member": "4"}
    ),
}


@pytest.mark.parametrize("case", sorted(GANG_ADMITTED))
def test_no_gang_required_where_the_engine_finds_none(case):
    verdict, decision = down(copy.deepcopy(GANG_ADMITTED[case]), policy="gangs", resource=JOB)
    assert not any(m.startswith("[gang-required]") for m in verdict.messages + verdict.warnings), verdict.messages
    assert not [v for v in decision.violations if v.rule == "gang-required"]


@pytest.mark.parametrize("cls", ["volcano-train", "kueue-train", "cosched-train", "kai-train"])
def test_a_multi_pod_job_the_webhook_ganged_is_admitted(cls):
    verdict, decision = up(batch_job(cls), policy="gangs", resource=JOB)
    assert decision.allowed and verdict.decision == ALLOW, (verdict.messages, decision.violations)


def test_gang_required_warns_where_the_policy_warns():
    verdict, decision = down(batch_job("volcano-train"), LENIENT, policy="gangs", resource=JOB)
    assert any(w.startswith("[gang-required]") for w in verdict.warnings)
    assert not any(m.startswith("[gang-required]") for m in verdict.messages)
    assert {v.action.value for v in decision.violations if v.rule == "gang-required"} == {"warn"}


def test_gang_required_is_waived_on_update_of_a_job_of_the_class():
    """The engine reports only what an UPDATE changes; the old Job already lacked its gang."""
    old = stored(batch_job("volcano-train"), "team-a", policy_named("gangs"))
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["team"] = "x"
    verdict, decision = judge(new, policy="gangs", operation="UPDATE", old=old, resource=JOB)
    assert not any(m.startswith("[gang-required]") for m in verdict.messages)
    assert not [v for v in decision.violations if v.rule == "gang-required"]


def test_a_deployment_of_a_gang_required_class_is_left_to_the_webhook():
    """Controllers are judged as their pods will be after mutation: no in-tree gang-required there."""
    tpl = batch_job("volcano-train")["spec"]["template"]
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"a": "b"}}, "template": tpl},
    }
    verdict, _ = down(deploy, policy="gangs", resource=("apps", "v1", "deployments"))
    assert not any(m.startswith("[gang-required]") for m in verdict.messages)


SWEEP = ("example.com", "v1", "sweeps")


def sweep(cls, annotations=None, labels=None, **spec):
    template = {"metadata": {"labels": {KEY: cls}}, "spec": {"containers": [{"name": "w", "image": "t:1"}]}}
    meta = {"name": "sweep", "annotations": annotations or {}, "labels": labels or {}}
    return {"apiVersion": "example.com/v1", "kind": "Sweep", "metadata": meta, "spec": {"template": template, **spec}}


def test_a_kind_of_the_policy_is_judged_with_its_own_count_and_keys():
    """The gangs policy's Sweep: two pods by default, Volcano's literal label and gangSize are read, its
    queue annotation is not (Volcano has a default queue), and coscheduling has no integration."""
    denied_by(*down(sweep("volcano-train"), policy="gangs", resource=SWEEP), "gang-required")
    spelled = sweep("volcano-train", labels={"example.com/gang": "on"}, gangSize=2)
    verdict, decision = down(spelled, policy="gangs", resource=SWEEP)
    assert not any(m.startswith("[gang-required]") for m in verdict.messages), verdict.messages
    assert not [v for v in decision.violations if v.rule == "gang-required"]
    denied_by(*down(sweep("cosched-train", workers=3), policy="gangs", resource=SWEEP), "gang-required")
    verdict, _ = down(sweep("volcano-train", workers=4, maxWorkers=1), policy="gangs", resource=SWEEP)
    assert not any(m.startswith("[gang-required]") for m in verdict.messages), "one pod: no gang needed"
    verdict, decision = up(sweep("volcano-train", legacyWorkers=3), policy="gangs", resource=SWEEP)
    assert decision.allowed and verdict.decision == ALLOW, (verdict.messages, decision.violations)
