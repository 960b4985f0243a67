"""The webhooks' matchConditions, taken from the rendered manifests and run with cel-python.

The oracle is the engine itself: an object is GPU-relevant when, for the engine's own view of its pod
templates (``webhook.engine.model.workload.templates``) and the default policy's GPU prefixes, intent
label and GPU-fraction annotations, it carries the label, a GPU-family resource or a fraction. The
CEL must agree on every object of the real-world corpus and on synthetic objects of every kind.
API-server semantics are emulated in ``cel_match`` (all conditions true -> call; any false -> skip;
errors -> failurePolicy).
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.conftest import CORPUS, need_shared
from tests.deploy.cel_match import CALL, REJECT, SKIP, Webhook, resource_of, unguarded_has
from tests.deploy.conftest import one, render
from webhook.engine import Request, report
from webhook.engine.model import reach
from webhook.engine.model.device_reach import exposed_pools, has_trigger
from webhook.engine.model.workload import classify, templates


@pytest.fixture(scope="module")
def webhooks() -> dict[str, Webhook]:
    docs = render("base")
    (mut,) = one(docs, "MutatingWebhookConfiguration")["webhooks"]
    (val,) = one(docs, "ValidatingWebhookConfiguration")["webhooks"]
    return {"mutating": Webhook(mut), "validating": Webhook(val)}


def gpu_relevant(obj: dict[str, Any], policy) -> bool:
    """The engine's notion, independent of the CEL: a label or annotation under the intent prefix (the
    workload label, an intent key, or a typo of one, which intent-unknown-key warns about) anywhere it
    reads them, or GPU resources."""
    if obj.get("apiVersion", "").startswith("resource.k8s.io/"):  # a claim object: what its rules read
        spec = obj.get("spec") or {}
        spec = spec.get("spec") or {} if obj["kind"] == "ResourceClaimTemplate" else spec
        return bool((spec.get("devices") or {}).get("requests"))  # at CREATE, from a user: what a pod gets
    prefix = policy.settings.prefix + "/"
    kind = classify(obj)
    assert kind is not None
    metas = [obj.get("metadata") or {}]
    if obj.get("kind") == "CronJob":
        metas.append(((obj.get("spec") or {}).get("jobTemplate") or {}).get("metadata") or {})
    for tpl in templates(obj, kind):
        metas.append(tpl.metadata)
        annotations = tpl.metadata.get("annotations") or {}
        if any(annotations.get(k) for k in policy.fraction_keys):  # KAI gpu-fraction / gpu-memory
            return True
        if tpl.spec.get("resourceClaims"):  # DRA: the engine resolves the claim; the CEL forwards it
            return True
        for group in ("containers", "initContainers"):
            for c in tpl.spec.get(group) or []:
                res = (c or {}).get("resources") or {}
                for section in ("limits", "requests"):
                    if any(policy.is_gpu_resource(k) for k in (res.get(section) or {})):
                        return True
                if any(k.startswith("deviceclass.resource.kubernetes.io/") for k in (res.get("limits") or {})):
                    return True
        if device_trigger_tolerating_sliced_pool(tpl.spec, policy) or reaching_a_gpu_pool(tpl.spec, policy):
            return True
    return any(k.startswith(prefix) for m in metas for side in ("labels", "annotations") for k in (m.get(side) or {}))


def device_trigger_tolerating_sliced_pool(spec: dict[str, Any], policy) -> bool:
    """privileged-gpu on a CPU-only template, as far as CEL can tell: a container with a trigger
    (the engine's own list) and either ``spec.nodeName`` (the scheduler is skipped) or tolerations for
    every taint of a pool of sliced cards (the engine's toleration matching). Selectors, affinity and
    which node a name is are the engine's to judge, after the call."""
    if not has_trigger(spec):
        return False
    if spec.get("nodeName"):  # the kubelet admits it past NoSchedule taints: only the engine can tell where
        return True
    tolerations = tuple(t for t in (reach.toleration(x) for x in spec.get("tolerations") or ()) if t is not None)
    return any(not reach.untolerated(policy.pools[name].taints, tolerations) for name in exposed_pools(policy))


def reaching_a_gpu_pool(spec: dict[str, Any], policy) -> bool:
    """At CREATE, as far as CEL can tell: the template names a node or tolerates every taint of some
    GPU pool (the engine's toleration matching). Its containers without a GPU grant get
    NVIDIA_VISIBLE_DEVICES=void, and /validate checks that they have it."""
    if spec.get("nodeName"):
        return True
    tolerations = tuple(t for t in (reach.toleration(x) for x in spec.get("tolerations") or ()) if t is not None)
    return any(not reach.untolerated(pool.taints, tolerations) for pool in policy.pools.values())


def corpus_objects() -> list[tuple[str, dict[str, Any]]]:
    need_shared(CORPUS)
    out = []
    for path in sorted(CORPUS.rglob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(doc, dict) and "kind" in doc:
                out.append((f"{path.relative_to(CORPUS)}#{i}", doc))
    return out


# --- expression hygiene -----------------------------------------------------------------------------


def test_every_nested_has_is_guarded(webhooks):
    for hook in webhooks.values():
        for name, expr, _ in hook.conditions:
            assert unguarded_has(expr) == [], f"{hook.name}/{name}: cel-go errors on these when the parent is absent"


def test_cel_uses_the_policy_gpu_prefixes_and_intent_label(webhooks, policy):
    (_, expr, _) = next(c for c in webhooks["validating"].conditions if c[0] == "gpu-relevant")
    found = re.findall(r"k\.startsWith\('([^']+)'\)", expr)
    dra = "deviceclass.resource.kubernetes.io/"  # DRA's implicit extended-resource names
    intent = policy.settings.prefix + "/"  # any label or annotation under it: intent keys and their typos
    assert set(found) == {*policy.gpu_prefixes, dra, intent}  # pod templates, and TrainJob's resourcesPerNode
    gpu = [p for p in found if p not in (dra, intent)]
    assert tuple(gpu[-len(policy.gpu_prefixes):]) == policy.gpu_prefixes
    assert "has(t.spec.resourceClaims) && size(t.spec.resourceClaims) > 0" in expr


# --- the real-world corpus --------------------------------------------------------------------------


def test_corpus(webhooks, policy):
    seen = {"call": [], "skip": []}
    for where, obj in corpus_objects():
        res = resource_of(obj)
        if res is None:
            # Not a matched kind: the rules already keep it away; the GPU condition must not match either
            # (a Service or ConfigMap is never GPU-relevant) and must not error.
            outcome = webhooks["validating"].evaluate(obj, resource=("", "v1", obj["kind"].lower() + "s"))
            assert outcome.results.get("gpu-relevant") is False or obj["kind"] not in ("Service", "ConfigMap"), where
            assert not outcome.errors, (where, outcome.errors)
            continue
        want = gpu_relevant(obj, policy)
        for name, hook in webhooks.items():
            group, _, resource = res
            if not hook.matches_rules(group, resource, "CREATE"):
                continue
            outcome = hook.evaluate(obj)
            assert not outcome.errors, (where, name, outcome.errors)
            assert outcome.decision == (CALL if want else SKIP), (where, name, outcome.results)
        seen["call" if want else "skip"].append(where)
    calls, skips = set(seen["call"]), set(seen["skip"])
    assert len(calls) >= 25 and len(skips) >= 10, (len(calls), len(skips))  # the corpus was really exercised

    def has(prefix: str, bucket: set[str]) -> bool:
        return any(w.startswith(prefix) for w in bucket)

    for positive in (
        "gpu-operator/gpu-pod.yaml", "gpu-operator/plugin-test.yaml", "hami/default_use.yaml",
        "hami/mig_example.yaml", "k8s-device-plugin/job-1.yaml", "volcano/mindspore-gpu.yaml",
        "kubernetes-examples/vllm-deployment.yaml", "volcano-vgpu-device-plugin/vgpu-case03.yaml",
        "volcano-vgpu-device-plugin/gpu-share.yaml", "k8s-dra-driver-gpu/mig-1g-12gb.yaml",
        "k8s-dra-driver-gpu/gpu-test2.yaml", "k8s-dra-driver-gpu/v1beta1-gpu-test1.yaml",
        "kueue/sample-dra-counter-job.yaml",  # a claim only: the CEL cannot resolve it, the engine does
        "kai-scheduler/gpu-sharing.yaml",  # a GPU fraction by annotation only: a GPU pod to the engine
        # no GPU request, but it tolerates the GPU taint: its pods get NVIDIA_VISIBLE_DEVICES=void (in a
        # cluster it runs in kube-system, which is never intercepted)
        "k8s-device-plugin/nvidia-device-plugin.yaml",
    ):  # fmt: skip
        assert has(positive, calls), positive
    for negative in (
        "hami/job-910B3.yaml",  # Ascend NPU, not a GPU family
        "kueue/sample-dra-extended-resource-job.yaml",  # example.com/gpu is not a GPU family we handle
        "network-operator/hostdevice-network-pod1.yaml",  # nvidia.com/hostdev is a NIC
        "website/nginx-deployment.yaml", "website/daemonset.yaml", "volcano/job.yaml",
    ):  # fmt: skip
        assert has(negative, skips) and not has(negative, calls), negative


def test_non_workload_kinds_never_match(webhooks):
    for where, obj in corpus_objects():
        if obj["kind"] in ("Service", "ConfigMap", "Namespace", "NetworkAttachmentDefinition"):
            outcome = webhooks["validating"].evaluate(obj)
            assert outcome.results["gpu-relevant"] is False, where


# --- synthetic objects of every kind ----------------------------------------------------------------

LABEL = {"gpu-admission.io/workload": "training"}


def container(limits: dict | None = None, requests: dict | None = None, name: str = "main") -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox"}
    res = {k: v for k, v in (("limits", limits), ("requests", requests)) if v is not None}
    if res:
        c["resources"] = res
    return c


def pod_spec(*containers: dict, init: tuple[dict, ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers) or [container()]}
    if init:
        spec["initContainers"] = list(init)
    return spec


def template(spec: dict, labels: dict | None = None) -> dict[str, Any]:
    tpl: dict[str, Any] = {"spec": spec}
    if labels is not None:
        tpl["metadata"] = {"labels": labels}
    return tpl


def make(kind: str, spec: dict, labels: dict | None = None, top_labels: dict | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "x", "namespace": "team-a"}
    if top_labels:
        meta["labels"] = top_labels
    if kind == "Pod":
        if labels:
            meta["labels"] = {**meta.get("labels", {}), **labels}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    tpl = template(spec, labels)
    if kind == "Job":
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"template": tpl}}
    if kind == "VolcanoJob":
        tasks = [
            {"name": "ps", "replicas": 1, "template": template(pod_spec())},
            {"name": "worker", "replicas": 2, "template": tpl},
        ]
        return {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": meta,
            "spec": {"minAvailable": 3, "tasks": tasks},
        }
    if kind == "CronJob":
        return {
            "apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta,
            "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": tpl}}},
        }  # fmt: skip
    api = "apps/v1"
    selector = {"matchLabels": {"app": "x"}}
    tpl.setdefault("metadata", {}).setdefault("labels", {})["app"] = "x"
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": {"selector": selector, "template": tpl}}


KINDS = ["Pod", "Job", "VolcanoJob", "CronJob", "Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"]
GPU_RESOURCES = [
    "nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/gpumem", "nvidia.com/gpucores",
    "nvidia.com/gpu.shared", "aliyun.com/gpu-mem", "volcano.sh/vgpu-number", "volcano.sh/gpu-memory",
    "tke.cloud.tencent.com/qgpu-memory",
]  # fmt: skip
NOT_GPU = [
    "cpu",
    "memory",
    "amd.com/gpu",
    "example.com/gpu",
    "nvidia.com/hostdev",
    "rdma/rdma_shared_device_a",
    "huawei.com/Ascend910",
]


def _hooks_for(webhooks: dict[str, Webhook], obj: dict[str, Any], operation: str = "CREATE") -> list[Webhook]:
    group, _, resource = resource_of(obj)
    hooks = [h for h in webhooks.values() if h.matches_rules(group, resource, operation)]
    assert hooks, (obj["kind"], operation)
    return hooks


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("case", "build", "want"),
    [
        ("plain", lambda k: make(k, pod_spec()), SKIP),
        ("no-resources-at-all", lambda k: make(k, {"containers": [{"name": "c", "image": "i"}]}), SKIP),
        ("cpu-only", lambda k: make(k, pod_spec(container({"cpu": "1", "memory": "1Gi"}))), SKIP),
        ("gpu-limit", lambda k: make(k, pod_spec(container({"nvidia.com/gpu": 1}))), CALL),
        ("gpu-request-only", lambda k: make(k, pod_spec(container(None, {"nvidia.com/gpu": 1}))), CALL),
        (
            "gpu-in-2nd-container",
            lambda k: make(k, pod_spec(container(), container({"nvidia.com/mig-1g.5gb": 1}, name="b"))),
            CALL,
        ),
        (
            "gpu-in-init-container",
            lambda k: make(k, pod_spec(container(), init=(container({"aliyun.com/gpu-mem": 4}),))),
            CALL,
        ),
        ("intent-label-on-template", lambda k: make(k, pod_spec(), labels=LABEL), CALL),
        ("other-labels", lambda k: make(k, pod_spec(), labels={"app.kubernetes.io/name": "x"}), SKIP),
        ("typo-label-on-template", lambda k: make(k, pod_spec(), labels={"gpu-admission.io/workloads": "dev"}), CALL),
        ("prefix-on-other-domain", lambda k: make(k, pod_spec(), labels={"x.gpu-admission.io/workload": "a"}), SKIP),
    ],
)
def test_synthetic_create(webhooks, policy, kind, case, build, want):
    obj = build(kind)
    assert gpu_relevant(obj, policy) == (want == CALL), "oracle disagrees with the table"
    for hook in _hooks_for(webhooks, obj):
        outcome = hook.evaluate(obj)
        assert not outcome.errors, outcome.errors
        assert outcome.decision == want, (hook.name, case, outcome.results)


@pytest.mark.parametrize("kind", KINDS)
def test_intent_label_on_the_workload_itself(webhooks, kind):
    obj = make(kind, pod_spec(), top_labels=LABEL)
    for hook in _hooks_for(webhooks, obj):
        assert hook.decide(obj) == CALL


@pytest.mark.parametrize("kind", KINDS)
def test_an_intent_key_written_as_an_annotation_reaches_the_webhook(webhooks, kind):
    """``workload`` as an annotation opts nothing in; the webhook must see the pod to warn about it."""
    obj = make(kind, pod_spec())
    target = obj if kind == "Pod" else obj["spec"].get("template") or obj
    target.setdefault("metadata", {}).setdefault("annotations", {})["gpu-admission.io/workload"] = "dev"
    for hook in _hooks_for(webhooks, obj):
        assert hook.decide(obj) == CALL, hook.name


def test_intent_label_on_cronjob_job_template(webhooks):
    obj = make("CronJob", pod_spec())
    obj["spec"]["jobTemplate"]["metadata"] = {"labels": LABEL}
    assert webhooks["validating"].decide(obj) == CALL


@pytest.mark.parametrize("resource", GPU_RESOURCES)
def test_every_gpu_family_matches(webhooks, policy, resource):
    obj = make("Pod", pod_spec(container({resource: 1})))
    assert policy.is_gpu_resource(resource)
    assert webhooks["mutating"].decide(obj) == CALL and webhooks["validating"].decide(obj) == CALL


@pytest.mark.parametrize("resource", NOT_GPU)
def test_other_resources_do_not_match(webhooks, policy, resource):
    obj = make("Pod", pod_spec(container({resource: 1}, {resource: 1})))
    assert not policy.is_gpu_resource(resource)
    assert webhooks["mutating"].decide(obj) == SKIP and webhooks["validating"].decide(obj) == SKIP


@pytest.mark.parametrize(
    "obj",
    [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}},  # no spec at all
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": {}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": {"template": {}}},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "x"}, "spec": {"jobTemplate": {}}},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "x"}, "spec": {"jobTemplate": {"spec": {}}}},
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "x"},
            "spec": {"tasks": [{"name": "a"}]},
        },
        {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "x"}, "spec": {"tasks": []}},
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "x"},
            "spec": {"containers": [{"name": "c", "resources": {}}]},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "x", "labels": {}, "annotations": {}},
            "spec": {"containers": [], "initContainers": []},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "x"},
            "spec": {"containers": [{"name": "c", "env": None, "resources": None}]},
        },
    ],
)
def test_absent_fields_are_false_not_errors(webhooks, obj):
    for hook in webhooks.values():
        outcome = hook.evaluate(obj)
        assert not outcome.errors, outcome.errors
        assert outcome.decision == SKIP


def test_mirror_pods_are_skipped(webhooks):
    obj = make("Pod", pod_spec(container({"nvidia.com/gpu": 1})))
    obj["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    assert webhooks["mutating"].decide(obj) == SKIP and webhooks["validating"].decide(obj) == SKIP


def test_evaluation_errors_follow_failure_policy(webhooks):
    """A malformed custom resource (tasks is not a list) makes the CEL error: Fail rejects, Ignore skips."""
    obj = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "x"}, "spec": {"tasks": 5}}
    assert webhooks["validating"].evaluate(obj).errors
    assert webhooks["validating"].decide(obj) == REJECT
    assert webhooks["mutating"].decide(obj) == SKIP
    # the mirror-pod annotation means nothing on a Volcano Job: it does not turn the error into a skip
    obj["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "x"}
    assert webhooks["validating"].decide(obj) == REJECT


@pytest.mark.parametrize("kind", ["Job", "VolcanoJob", "Deployment", "CronJob"])
def test_the_mirror_annotation_hides_no_other_kind(webhooks, kind):
    """Only the kubelet makes mirror pods; on any other kind the annotation is a string the user
    writes, and it once hid a GPU Job or Volcano Job from both webhooks."""
    obj = make(kind, pod_spec(container({"nvidia.com/gpu": 1})))
    obj["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    assert webhooks["validating"].decide(obj) == CALL
    if webhooks["mutating"].matches_rules(*resource_of(obj)[::2], "CREATE"):
        assert webhooks["mutating"].decide(obj) == CALL


def test_pod_updates_and_ephemeral_containers_reach_the_validating_webhook(webhooks):
    """``kubectl debug`` adds an ephemeral container through pods/ephemeralcontainers; the review's
    object is the whole Pod (request.resource pods, subResource ephemeralcontainers)."""
    hook = webhooks["validating"]
    assert hook.matches_rules("", "pods", "UPDATE")
    assert hook.matches_rules("", "pods/ephemeralcontainers", "UPDATE")
    old = make("Pod", pod_spec(container({"nvidia.com/mig-1g.5gb": 1})))
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [
        {"name": "debugger", "image": "busybox", "securityContext": {"privileged": True}}
    ]
    outcome = hook.evaluate(new, operation="UPDATE", old=old)
    assert not outcome.errors and outcome.decision == CALL, outcome.results
    tolerated = copy.deepcopy(old)
    tolerated["spec"]["tolerations"] = [{"operator": "Exists"}]
    assert hook.decide(tolerated, operation="UPDATE", old=old) == CALL
    relabelled = copy.deepcopy(old)
    relabelled["metadata"].setdefault("labels", {})["team"] = "b"
    assert hook.decide(relabelled, operation="UPDATE", old=old) == CALL
    same = copy.deepcopy(old)
    same["metadata"]["resourceVersion"] = "2"
    assert hook.decide(same, operation="UPDATE", old=old) == SKIP, "an update that changes nothing judged is skipped"


# --- UPDATE: only changes that can change the verdict reach the validating webhook ------------------


def _update(kind: str, change) -> tuple[dict[str, Any], dict[str, Any]]:
    """A GPU workload before and after ``change``."""
    old = make(kind, pod_spec(container({"nvidia.com/gpu": 1})))
    new = copy.deepcopy(old)
    change(new)
    return old, new


@pytest.mark.parametrize(
    ("kind", "what", "change", "want"),
    [
        ("Deployment", "scale up", lambda o: o["spec"].__setitem__("replicas", 5), CALL),  # gang rules read it
        ("Deployment", "scale down", lambda o: o["spec"].__setitem__("replicas", 0), SKIP),
        (
            "Deployment",
            "revision annotation",
            lambda o: o["metadata"].setdefault("annotations", {}).__setitem__("deployment.kubernetes.io/revision", "2"),
            SKIP,
        ),
        ("Deployment", "finalizers", lambda o: o["metadata"].__setitem__("finalizers", ["foregroundDeletion"]), SKIP),
        (
            "Deployment",
            "template image",
            lambda o: o["spec"]["template"]["spec"]["containers"][0].__setitem__("image", "v2"),
            CALL,
        ),
        (
            "Deployment",
            "intent annotation",
            lambda o: o["metadata"].setdefault("annotations", {}).__setitem__("gpu-admission.io/gpus", "2"),
            CALL,
        ),
        (
            "Deployment",
            "label",
            lambda o: o["metadata"].setdefault("labels", {}).__setitem__("gpu-admission.io/workload", "inference"),
            CALL,
        ),
        ("ReplicaSet", "scale down", lambda o: o["spec"].__setitem__("replicas", 0), SKIP),  # a rollout's old RS
        ("StatefulSet", "scale up", lambda o: o["spec"].__setitem__("replicas", 8), CALL),
        ("StatefulSet", "template", lambda o: o["spec"]["template"]["metadata"]["labels"].__setitem__("v", "2"), CALL),
        ("DaemonSet", "ownerReferences", lambda o: o["metadata"].__setitem__("ownerReferences", []), SKIP),
        ("CronJob", "schedule", lambda o: o["spec"].__setitem__("schedule", "5 * * * *"), SKIP),
        ("CronJob", "job template", lambda o: o["spec"]["jobTemplate"]["spec"].__setitem__("parallelism", 4), CALL),
        ("Job", "parallelism", lambda o: o["spec"].__setitem__("parallelism", 8), CALL),
        (
            "Job",
            "status-like metadata",
            lambda o: o["metadata"].setdefault("annotations", {}).__setitem__("batch.kubernetes.io/job-tracking", ""),
            SKIP,
        ),
        ("VolcanoJob", "minAvailable", lambda o: o["spec"].__setitem__("minAvailable", 2), CALL),
        ("VolcanoJob", "intent annotation removed", None, CALL),
    ],
)
def test_update_narrowing(webhooks, kind, what, change, want):
    if change is None:  # removal of an intent annotation present on the old object
        old = make(kind, pod_spec(container({"nvidia.com/gpu": 1})))
        old["metadata"]["annotations"] = {"gpu-admission.io/gpu-memory": "4Gi"}
        new = copy.deepcopy(old)
        new["metadata"]["annotations"] = {}
    else:
        old, new = _update(kind, change)
    hook = webhooks["validating"]
    group, _, resource = resource_of(new)
    assert hook.matches_rules(group, resource, "UPDATE")
    outcome = hook.evaluate(new, operation="UPDATE", old=old)
    assert not outcome.errors, outcome.errors
    assert outcome.decision == want, (kind, what, outcome.results)


def test_update_of_a_non_gpu_workload_is_skipped(webhooks):
    old = make("Deployment", pod_spec())
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "v2"
    assert webhooks["validating"].decide(new, operation="UPDATE", old=old) == SKIP


def test_no_update_reaches_the_mutating_webhook(webhooks):
    hook = webhooks["mutating"]
    for group, resource in (("", "pods"), ("batch", "jobs"), ("batch.volcano.sh", "jobs")):
        assert hook.matches_rules(group, resource, "CREATE") and not hook.matches_rules(group, resource, "UPDATE")


def test_condition_count_is_far_from_the_limit(webhooks):
    for hook in webhooks.values():
        assert len(hook.conditions) <= 64


# --- privileged-gpu: CPU-only pods with a way past the device grant -----------------------------------------

BLANKET = [{"operator": "Exists"}]
GPU_TAINT = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
DEV_VOLUME = {"volumes": [{"name": "h", "hostPath": {"path": "/dev"}}]}
CPU_TRIGGERS = {
    "privileged": ({"securityContext": {"privileged": True}}, {}),
    "SYS_ADMIN": ({"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}, {}),
    "CAP_SYS_ADMIN": ({"securityContext": {"capabilities": {"add": ["NET_RAW", "CAP_SYS_ADMIN"]}}}, {}),
    "sys_admin": ({"securityContext": {"capabilities": {"add": ["sys_admin"]}}}, {}),
    "all": ({"securityContext": {"capabilities": {"add": ["all"]}}}, {}),
    "hostPath mount": ({"volumeMounts": [{"name": "h", "mountPath": "/h"}]}, DEV_VOLUME),
    "hostPath device": ({"volumeDevices": [{"name": "h", "devicePath": "/x"}]}, DEV_VOLUME),
    "NVIDIA_VISIBLE_DEVICES": ({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}, {}),
    "NVIDIA_DRIVER_CAPABILITIES": ({"env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute"}]}, {}),
    "valueFrom": (
        {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}, {}
    ),
    "envFrom": ({"envFrom": [{"configMapRef": {"name": "c"}}]}, {}),
}  # fmt: skip
NOT_TRIGGERS = {
    "IPC_LOCK": ({"securityContext": {"capabilities": {"add": ["IPC_LOCK"]}, "privileged": False}}, {}),
    "none": ({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]}, {}),
    "prefixed envFrom": ({"envFrom": [{"prefix": "APP_", "configMapRef": {"name": "c"}}]}, {}),
    "device-plugins hostPath": (
        {"volumeMounts": [{"name": "h", "mountPath": "/h"}]},
        {"volumes": [{"name": "h", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}]},
    ),
}


def _cpu(kind: str, fields: dict, spec_extra: dict, **spec: Any) -> dict[str, Any]:
    c = {**container(), **copy.deepcopy(fields)}
    return make(kind, {"containers": [c], **copy.deepcopy(spec_extra), **spec})


@pytest.mark.parametrize("trigger", sorted(CPU_TRIGGERS))
def test_cpu_only_pod_with_a_trigger_tolerating_a_sliced_pool_is_forwarded(webhooks, policy, trigger):
    """CEL cannot judge reach: a trigger plus tolerations for a sliced pool's taints is forwarded, and
    the engine (the oracle) agrees that such a pod is GPU-relevant."""
    fields, extra = CPU_TRIGGERS[trigger]
    for tolerations in (BLANKET, GPU_TAINT):
        obj = _cpu("Pod", fields, extra, tolerations=tolerations)
        assert report(policy, Request(obj, namespace="team-a")).relevant, trigger
        for hook in _hooks_for(webhooks, obj):
            outcome = hook.evaluate(obj)
            assert not outcome.errors and outcome.decision == CALL, (trigger, hook.name, outcome.results)
    quiet = _cpu("Pod", fields, extra)  # tolerates no GPU taint: reaches no GPU pool
    assert not report(policy, Request(quiet, namespace="team-a")).relevant
    for hook in _hooks_for(webhooks, quiet):
        assert hook.decide(quiet) == SKIP, (trigger, hook.name)


@pytest.mark.parametrize("what", sorted(NOT_TRIGGERS))
def test_tolerant_cpu_pod_without_a_trigger_is_sent_at_create_only(webhooks, what):
    """It may land on a GPU node: /mutate gives its containers NVIDIA_VISIBLE_DEVICES=void and /validate
    checks it. Its later UPDATEs (labels; every bound pod has a nodeName) are none of the webhook's."""
    fields, extra = NOT_TRIGGERS[what]
    obj = _cpu("Pod", fields, extra, tolerations=BLANKET)
    for hook in _hooks_for(webhooks, obj):
        assert hook.decide(obj) == CALL, (what, hook.name)
    relabelled = copy.deepcopy(obj)
    relabelled["metadata"]["labels"] = {"team": "b"}
    relabelled["spec"]["nodeName"] = "gpu-node-1"
    old = copy.deepcopy(obj)
    old["spec"]["nodeName"] = "gpu-node-1"
    assert webhooks["validating"].decide(relabelled, operation="UPDATE", old=old) == SKIP, what


@pytest.mark.parametrize("kind", KINDS)
def test_privileged_cpu_templates_of_every_kind(webhooks, policy, kind):
    obj = _cpu(kind, {"securityContext": {"privileged": True}}, {}, tolerations=BLANKET)
    assert report(policy, Request(obj, namespace="team-a")).relevant
    for hook in _hooks_for(webhooks, obj):
        outcome = hook.evaluate(obj)
        assert not outcome.errors and outcome.decision == CALL, (kind, hook.name, outcome.results)


@pytest.mark.parametrize("path", ["/dev", "//dev", "/dev/", "/dev/../dev/nvidia0", "/", "//", "dev", "/./dev/shm"])
def test_host_paths_reaching_dev_are_forwarded(webhooks, path):
    extra = {"volumes": [{"name": "h", "hostPath": {"path": path}}]}
    obj = _cpu("DaemonSet", {"volumeMounts": [{"name": "h", "mountPath": "/h"}]}, extra, tolerations=BLANKET)
    assert webhooks["validating"].decide(obj) == CALL, path


def test_a_privileged_ephemeral_container_on_a_tolerant_cpu_pod_reaches_validate(webhooks):
    old = _cpu("Pod", {}, {}, tolerations=BLANKET)
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = [{"name": "dbg", "image": "busybox", "securityContext": {"privileged": True}}]
    hook = webhooks["validating"]
    assert hook.matches_rules("", "pods/ephemeralcontainers", "UPDATE")
    outcome = hook.evaluate(new, operation="UPDATE", old=old)
    assert not outcome.errors and outcome.decision == CALL, outcome.results
    assert hook.decide(old, operation="UPDATE", old=old) == SKIP


@pytest.mark.parametrize("trigger", sorted(CPU_TRIGGERS))
def test_cpu_only_pod_with_a_trigger_and_a_node_name_is_forwarded(webhooks, policy, trigger):
    """``spec.nodeName`` skips the scheduler, and the kubelet's admission checks only NoExecute taints:
    a privileged CPU-only pod naming a MIG node runs there with no toleration at all. CEL cannot tell
    which node a name is, so every such template is forwarded and the engine judges the name."""
    fields, extra = CPU_TRIGGERS[trigger]
    for kind in ("Pod", "Deployment"):
        obj = _cpu(kind, fields, extra, nodeName="gpu-node-7")
        assert report(policy, Request(obj, namespace="team-a")).relevant, trigger
        for hook in _hooks_for(webhooks, obj):
            outcome = hook.evaluate(obj)
            assert not outcome.errors and outcome.decision == CALL, (trigger, kind, hook.name, outcome.results)
    # no trigger: at CREATE its containers get NVIDIA_VISIBLE_DEVICES=void (the node may be a GPU node);
    # an UPDATE of it (every bound pod has a nodeName) is no business of ours
    plain = _cpu("Pod", {}, {}, nodeName="gpu-node-7")
    for hook in _hooks_for(webhooks, plain):
        assert hook.decide(plain) == CALL, hook.name
    relabelled = copy.deepcopy(plain)
    relabelled["metadata"]["labels"] = {"team": "b"}
    assert webhooks["validating"].decide(relabelled, operation="UPDATE", old=plain) == SKIP


@pytest.mark.parametrize("operator", ["Gt", "Lt"])
def test_numeric_toleration_operators_are_forwarded(webhooks, policy, operator):
    """Kubernetes 1.35's ``Gt``/``Lt`` tolerations compare a taint's value as an integer; the default
    pools leave the GPU taint's value open, so ``nvidia.com/gpu Gt 0`` may tolerate it. Found by the
    oracle's long run: the CEL knew only ``Exists``/``Equal``, so such a CPU-only pod with a trigger was
    stored unjudged (and its UPDATEs then held only to what they added)."""
    tolerations = [{"key": "nvidia.com/gpu", "operator": operator, "value": "0", "effect": "NoSchedule"}]
    obj = _cpu("Pod", {"securityContext": {"privileged": True}}, {}, tolerations=tolerations)
    assert report(policy, Request(obj, namespace="team-a")).relevant
    for hook in _hooks_for(webhooks, obj):
        assert hook.decide(obj) == CALL, hook.name


def _toleration_strategy(policy):
    keys = sorted({t[0] for p in policy.pools.values() for t in p.taints} | {"", "other"})
    values = sorted({t[1] for p in policy.pools.values() for t in p.taints if t[1]} | {"", "0", "7", "present"})
    return st.fixed_dictionaries(
        {
            "key": st.sampled_from(keys),
            "operator": st.sampled_from(["Exists", "Equal", "Gt", "Lt", ""]),
            "value": st.sampled_from(values),
        },
        optional={"effect": st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute", ""])},
    )


def test_the_cel_forwards_every_cpu_template_the_engine_judges(webhooks, policy):
    """For any tolerations (every operator, effect, key and value the policy's taints use) and an
    optional ``nodeName``, a CPU-only pod with a trigger that the engine finds GPU-relevant (it can
    reach a sliced pool) is forwarded by the matchConditions: the CEL is a superset of the engine."""

    @settings(max_examples=300, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(_toleration_strategy(policy), max_size=3), st.sampled_from([None, "gpu-node-1"]))
    @example([{"key": "nvidia.com/gpu", "operator": "Lt", "value": "9"}], None)  # the oracle's find
    @example([], "gpu-node-1")
    def forwarded(tolerations, node_name):
        extra = {"nodeName": node_name} if node_name else {}
        obj = _cpu("Pod", {"securityContext": {"privileged": True}}, {}, tolerations=tolerations, **extra)
        if report(policy, Request(obj, namespace="team-a")).relevant:
            assert webhooks["validating"].decide(obj) == CALL, obj["spec"]

    forwarded()


# --- a pod UPDATE that changes what the pod can reach (issue 41, item 1) ---------------------------------

CUDA_IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
GATES = [{"name": "example.com/hold"}]
TRAIN_TAINT = {"key": "workload", "operator": "Equal", "value": "gpu-train", "effect": "NoSchedule"}
SERVING = {"gpu-admission.io/tier": "serving"}


def _cuda_pod(**spec: Any) -> dict[str, Any]:
    """A pod with no GPU resources of a CUDA image (its own NVIDIA_VISIBLE_DEVICES=all)."""
    return make("Pod", {"containers": [{"name": "main", "image": CUDA_IMAGE}], **spec})


def _engine_update(policy, new: dict[str, Any], old: dict[str, Any]):
    return report(
        policy, Request(new, operation="UPDATE", old_object=old, namespace="team-a", namespace_labels=SERVING)
    )


@pytest.mark.parametrize(
    ("what", "change"),
    [
        ("tolerations", lambda s: s.__setitem__("tolerations", copy.deepcopy(GPU_TAINT))),
        ("blanket toleration", lambda s: s.__setitem__("tolerations", copy.deepcopy(BLANKET))),
        ("training pool", lambda s: s.__setitem__("tolerations", [*GPU_TAINT, TRAIN_TAINT])),
        (
            "gated: tolerations and nodeSelector",
            lambda s: s.update(tolerations=copy.deepcopy(GPU_TAINT), nodeSelector={"workload": "gpu-dev"}),
        ),
    ],
)
def test_a_cpu_pod_gaining_a_gpu_pools_reach_by_update_reaches_validate(webhooks, policy, what, change):
    """The attack: created with no toleration (neither webhook called, so no device void), the pod gains a
    GPU pool's tolerations (and, gated, its selector) by UPDATE. The validating webhook is called and
    the engine denies; the mutating webhook never sees a pod UPDATE."""
    old = _cuda_pod(schedulingGates=copy.deepcopy(GATES))
    for hook in _hooks_for(webhooks, old):
        assert hook.decide(old) == SKIP, hook.name
    new = copy.deepcopy(old)
    change(new["spec"])
    outcome = webhooks["validating"].evaluate(new, operation="UPDATE", old=old)
    assert not outcome.errors and outcome.decision == CALL, (what, outcome.results)
    assert not webhooks["mutating"].matches_rules("", "pods", "UPDATE")
    decision = _engine_update(policy, new, old)
    assert not decision.allowed and "re-create the pod" in decision.denials[0].message, what


def test_removing_the_last_gate_of_a_pod_that_can_reach_a_gpu_pool_reaches_validate(webhooks):
    old = _cuda_pod(schedulingGates=copy.deepcopy(GATES), tolerations=copy.deepcopy(GPU_TAINT))
    ungated = copy.deepcopy(old)
    del ungated["spec"]["schedulingGates"]
    assert webhooks["validating"].decide(ungated, operation="UPDATE", old=old) == CALL
    emptied = copy.deepcopy(old)
    emptied["spec"]["schedulingGates"] = []
    assert webhooks["validating"].decide(emptied, operation="UPDATE", old=old) == CALL
    still = copy.deepcopy(old)
    still["spec"]["schedulingGates"] = [*GATES, {"name": "other"}]
    assert webhooks["validating"].decide(still, operation="UPDATE", old=old) == SKIP, "still gated, same reach"
    quiet = _cuda_pod(schedulingGates=copy.deepcopy(GATES))  # tolerates no GPU taint: reaches no GPU pool
    ungated_quiet = copy.deepcopy(quiet)
    del ungated_quiet["spec"]["schedulingGates"]
    assert webhooks["validating"].decide(ungated_quiet, operation="UPDATE", old=quiet) == SKIP


def test_reach_changes_that_reach_no_gpu_pool_and_other_updates_stay_away(webhooks):
    old = _cuda_pod(schedulingGates=copy.deepcopy(GATES))
    other = copy.deepcopy(old)
    other["spec"]["tolerations"] = [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
    other["spec"]["nodeSelector"] = {"zone": "a"}
    assert webhooks["validating"].decide(other, operation="UPDATE", old=old) == SKIP
    tolerant = _cuda_pod(tolerations=copy.deepcopy(GPU_TAINT), nodeName="gpu-node-1")
    relabelled = copy.deepcopy(tolerant)
    relabelled["metadata"]["labels"] = {"team": "b"}
    assert webhooks["validating"].decide(relabelled, operation="UPDATE", old=tolerant) == SKIP


def _reach_change_strategy(policy):
    taint = _toleration_strategy(policy)
    selector = st.dictionaries(st.sampled_from(["workload", "zone"]), st.sampled_from(["gpu-dev", "gpu-train", "a"]))
    return st.fixed_dictionaries(
        {},
        optional={
            "tolerations": st.lists(taint, max_size=3),
            "nodeSelector": selector,
            "schedulingGates": st.sampled_from([[], copy.deepcopy(GATES)]),
        },
    )


def test_the_cel_forwards_every_pod_update_the_engine_denies(webhooks, policy):
    """For any old and new reach of a CPU-only pod (tolerations of every operator, effect, key and value
    the policy's taints use, selectors, gates), an UPDATE the engine denies is forwarded: the CEL is a
    superset of the engine for pod UPDATEs as for CREATEs."""

    @settings(max_examples=300, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(_reach_change_strategy(policy), _reach_change_strategy(policy), st.booleans())
    @example({"schedulingGates": GATES}, {"tolerations": BLANKET}, False)
    @example({"schedulingGates": GATES, "tolerations": GPU_TAINT}, {"tolerations": GPU_TAINT}, False)
    def forwarded(before, after, privileged):
        fields = {"securityContext": {"privileged": True}} if privileged else {}
        old = _cpu("Pod", {"image": CUDA_IMAGE, **fields}, {}, **copy.deepcopy(before))
        new = _cpu("Pod", {"image": CUDA_IMAGE, **fields}, {}, **copy.deepcopy(after))
        if not _engine_update(policy, new, old).allowed:
            outcome = webhooks["validating"].evaluate(new, operation="UPDATE", old=old)
            assert not outcome.errors and outcome.decision == CALL, (before, after, outcome.results)

    forwarded()


# --- DRA claims on their own ---------------------------------------------------------------------------

MARKER = "resource.kubernetes.io/extended-resource-claim"


def _claim(kind: str = "ResourceClaim", *, marker: bool = False, **exactly: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", **exactly}}]}
    }
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "c", "namespace": "team-a"},
        "spec": spec if kind == "ResourceClaim" else {"spec": spec},
    }
    if marker:
        annotations = {MARKER: "true"}
        if kind == "ResourceClaim":
            obj["metadata"]["annotations"] = annotations
        else:
            obj["spec"]["metadata"] = {"annotations": annotations}
    return obj


ALICE = {"username": "alice", "groups": ["system:authenticated"]}
SCHEDULER = {"username": "system:kube-scheduler", "groups": ["system:authenticated"]}
CLAIM_CONTROLLER = {"username": "system:serviceaccount:kube-system:resourceclaim-controller", "groups": []}


@pytest.mark.parametrize("kind", ["ResourceClaim", "ResourceClaimTemplate"])
def test_claims_reach_validate_only_when_there_is_something_to_judge(webhooks, kind):
    val = webhooks["validating"]
    assert not webhooks["mutating"].matches_rules("resource.k8s.io", resource_of(_claim(kind))[2], "CREATE")
    assert val.decide(_claim(kind), user_info=CLAIM_CONTROLLER) == SKIP  # a template's copy: judged as the template
    assert val.decide(_claim(kind, marker=True), user_info=ALICE) == CALL
    assert val.decide(_claim(kind, tolerations=[{"operator": "Exists"}]), user_info=ALICE) == CALL
    assert val.decide(_claim(kind, capacity={"requests": {"memory": "4Gi"}}), user_info=ALICE) == CALL
    sub = _claim(kind)
    spec = sub["spec"] if kind == "ResourceClaim" else sub["spec"]["spec"]
    spec["devices"]["requests"][0] = {
        "name": "gpu",
        "firstAvailable": [{"name": "a", "deviceClassName": "gpu.nvidia.com", "tolerations": [{"key": "k"}]}],
    }
    assert val.decide(sub, user_info=ALICE) == CALL
    # the scheduler's own claims never depend on the webhook
    assert val.decide(_claim(kind, marker=True), user_info=SCHEDULER) == SKIP
    # UPDATE: only a marker the update adds (controllers' finalizer writes never reach it)
    marked = _claim(kind, marker=True)
    assert val.decide(marked, operation="UPDATE", old=_claim(kind), user_info=ALICE) == CALL
    again = copy.deepcopy(marked)
    again["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    assert val.decide(again, operation="UPDATE", old=marked, user_info=ALICE) == SKIP
    assert val.decide(_claim(kind, tolerations=[{"operator": "Exists"}]), operation="UPDATE", old=_claim(kind)) == SKIP
    assert val.decide(_claim(kind, allocationMode="All"), operation="UPDATE", old=_claim(kind), user_info=ALICE) == SKIP


def test_the_claim_condition_agrees_with_the_engine(webhooks, policy):
    # whatever the engine would find in a claim object, the CEL forwards (no user escapes by shape)
    val = webhooks["validating"]
    for obj in (
        _claim(marker=True),
        _claim("ResourceClaimTemplate", marker=True),
        _claim(tolerations=[{"operator": "Exists"}]),
        _claim("ResourceClaimTemplate", tolerations=[{"key": "gpu.nvidia.com/xid", "operator": "Exists"}]),
    ):
        assert report(policy, Request(obj, namespace="team-a")).violations
        assert val.decide(obj, user_info=ALICE) == CALL


@pytest.mark.parametrize("kind", ["ResourceClaim", "ResourceClaimTemplate"])
def test_a_gpu_claim_created_after_its_pod_reaches_validate(webhooks, policy, kind):
    """A template created after the pod that names it gives the pod its devices: its CREATE is judged for
    what the pod would be (count, All, adminAccess, classes), so every claim object with a request is sent,
    except the copies the resourceclaim controller makes of a template (judged when it was created)."""
    val = webhooks["validating"]
    for fields in ({"allocationMode": "All"}, {"count": 8}, {"adminAccess": True}, {}):
        assert val.decide(_claim(kind, **fields), user_info=ALICE) == CALL, fields
    assert val.decide(_claim(kind, adminAccess=True), user_info=CLAIM_CONTROLLER) == SKIP
    assert val.decide(_claim(kind, marker=True), user_info=CLAIM_CONTROLLER) == CALL  # the marker: anyone's
    empty = _claim(kind)
    spec = empty["spec"] if kind == "ResourceClaim" else empty["spec"]["spec"]
    spec["devices"]["requests"] = []
    assert val.decide(empty, user_info=ALICE) == SKIP  # nothing asked: nothing to judge


# --- cost: what the CEL does not read, it forwards ---------------------------------------------------


def _past(what: str) -> dict[str, Any]:
    """A CPU-only pod (tolerating the GPU taint, for the fields read only then) with one more ``what``
    than the conditions read."""
    from webhook.render.webhooks import MANY

    n = MANY[what] + 1
    c: dict[str, Any] = {"name": "main", "image": "busybox"}
    spec: dict[str, Any] = {"containers": [c], "tolerations": copy.deepcopy(GPU_TAINT)}
    labels: dict[str, str] = {}
    if what == "containers":
        spec["containers"] = [{"name": f"c{i}", "image": "busybox"} for i in range(n)]
    elif what == "resources":
        c["resources"] = {"limits": {f"example.com/r{i}": "1" for i in range(n)}}
    elif what == "metadata":
        labels = {f"l{i}": "v" for i in range(n)}
    elif what == "tolerations":
        spec["tolerations"] = [{"key": f"k{i}", "operator": "Exists"} for i in range(n)]
    elif what == "env":
        c["env"] = [{"name": f"E{i}", "value": "v"} for i in range(n)]
    elif what == "volumes":
        spec["volumes"] = [{"name": f"v{i}", "emptyDir": {}} for i in range(n)]
    return make("Pod", spec, labels=labels)


@pytest.mark.parametrize("what", ["containers", "resources", "metadata", "tolerations", "env", "volumes"])
def test_lists_past_what_the_cel_reads_are_forwarded_and_the_engine_decides(webhooks, policy, what):
    """cel-go charges every step, and the apiserver stops an expression at 1,000,000: every list the
    conditions walk is bounded, and one longer than the bound is forwarded unread (at UPDATE for the
    fields only read then), never skipped and never an evaluation error; the engine then admits the
    CPU-only pod it is."""
    obj = _past(what)
    old = copy.deepcopy(obj)
    old["metadata"].setdefault("annotations", {})["gpu-admission.io/gpus"] = "1"  # an UPDATE that is sent
    outcome = webhooks["validating"].evaluate(obj, operation="UPDATE", old=old)
    if what == "tolerations":  # read as tolerating every taint: sent at CREATE, as a pool's toleration is
        outcome = webhooks["validating"].evaluate(obj)
    assert not outcome.errors and outcome.results["gpu-relevant"] is True, (what, outcome.results)
    control = copy.deepcopy(obj)  # tolerating nothing, the same pod is never sent
    del control["spec"]["tolerations"]
    if what in ("env", "volumes", "tolerations"):
        assert webhooks["validating"].decide(control, operation="UPDATE", old=control) == SKIP, what
    decision = report(policy, Request(obj, namespace="team-a"))
    assert decision.allowed, [v.render() for v in decision.violations]
