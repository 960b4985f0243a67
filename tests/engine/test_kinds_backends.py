"""Where each kind's placement and queue land for each backend: TrainJob through ``spec.runtimePatches``
(it has no pod template of its own), the Volcano and KAI queue keys of every kind, the KAI backend.

The TrainJob facts are Kubeflow Trainer v2.3's (``trainjob_types.go``: ``RuntimePatch`` keyed by
``manager``, ``PodSpecPatch`` limited to labels, annotations, nodeSelector, affinity, tolerations,
volumes, schedulingGates, security contexts and container env/volumeMounts/securityContext; GPUs in
``spec.trainer.resourcesPerNode``); ``tests/engine/helpers.runtime_patch_errors`` checks the written
entry against them, and the projected pod template is validated as a strict ``PodTemplateSpec``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.conftest import POLICIES, SERVING_NS
from tests.engine.helpers import container, rules, run, schema_errors, violation
from tests.engine.test_kinds import jobset, lws, mpijob, pytorchjob, raycluster, rayjob, tfjob, tpl
from webhook.engine import Request, Stage, report
from webhook.engine.model.workload import classify, templates
from webhook.policy.loader import load_policy_texts

TRAIN_LABELS = {"gpu-admission.io/workload": "training"}
MANAGER = "gpu-admission.io/webhook"


def trainjob(meta: dict | None = None, patches: list | None = None, gpus: str | None = "8", **trainer: Any) -> dict:
    obj: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "llm", **copy.deepcopy(meta if meta is not None else {"labels": TRAIN_LABELS})},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"cpu": "8"}}, **trainer},
        },
    }
    if gpus is not None and meta is None:
        obj["metadata"]["annotations"] = {"gpu-admission.io/gpus": gpus}
    if patches is not None:
        obj["spec"]["runtimePatches"] = patches
    return obj


def user_patch(manager: str = "team/ops", **spec: Any) -> dict:
    return {
        "manager": manager,
        "trainingRuntimeSpec": {
            "template": {
                "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": spec}}}}]}
            }
        },
    }


def our_pod(obj: dict) -> dict:
    entry = next(p for p in obj["spec"]["runtimePatches"] if p["manager"] == MANAGER)
    jobs = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return next(j for j in jobs if j["name"] == "node")["template"]["spec"]["template"]


# --- TrainJob: placement through runtimePatches ---------------------------------------------------


def test_trainjob_placement_lands_where_the_trainer_reads_it(policy):
    d = run(policy, trainjob(), training=True)  # the patch applies; re-mutating the output yields none
    assert d.allowed, [v.render() for v in d.violations]
    out = d.mutated
    trainer = out["spec"]["trainer"]
    assert trainer["resourcesPerNode"]["limits"] == {
        "cpu": "8",
        "nvidia.com/gpu": "8",
        "rdma/rdma_shared_device_a": "1",
    }
    assert {e["name"] for e in trainer["env"]} >= {"NCCL_IB_HCA", "NCCL_SOCKET_IFNAME"}  # env of `node`: the trainer's
    pod = our_pod(out)
    assert pod["spec"]["nodeSelector"] == {"workload": "gpu-train"}
    assert {t["key"] for t in pod["spec"]["tolerations"]} == {"nvidia.com/gpu", "workload"}
    assert pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "rdma-net-a@net1"
    assert pod["spec"]["containers"] == [
        {
            "name": "node",
            "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
        }
    ]
    term = pod["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["labelSelector"] == {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": "llm"}}
    assert schema_errors(out) == []
    # /validate sees the stored object: the placement is there, so placement-missing has nothing to say
    stored = report(
        policy,
        Request(out, namespace="team-a", namespace_labels={"gpu-admission.io/tier": "training"}, stage=Stage.STORED),
    )
    assert "placement-missing" not in rules(stored), [v.render() for v in stored.violations]


def test_an_unmutated_trainjob_is_placement_missing_at_validate(policy):
    d = report(
        policy,
        Request(
            trainjob(), namespace="team-a", namespace_labels={"gpu-admission.io/tier": "training"}, stage=Stage.STORED
        ),
    )
    v = violation(d, "placement-missing")
    assert v.path.startswith("spec.runtimePatches") and "workload=gpu-train" in v.message


def test_trainjob_keeps_other_managers_patches_and_merges_with_them(policy):
    kueue = user_patch(
        "kueue.x-k8s.io/manager",
        nodeSelector={"cloud.example/flavor": "h100"},
        tolerations=[{"key": "flavor", "operator": "Exists"}],
    )
    d = run(policy, trainjob(patches=[kueue]), training=True)
    assert d.allowed, [v.render() for v in d.violations]
    out = d.mutated
    assert out["spec"]["runtimePatches"][0] == kueue, "another manager's entry is never changed"
    pod = our_pod(out)
    # the webhook's entry holds the merged value, whatever order the controller applies entries in
    assert pod["spec"]["nodeSelector"] == {"cloud.example/flavor": "h100", "workload": "gpu-train"}
    assert {t["key"] for t in pod["spec"]["tolerations"]} == {"flavor", "nvidia.com/gpu", "workload"}
    assert schema_errors(out) == []


def test_a_runtime_patch_cannot_steer_a_trainjob_onto_a_pool_the_namespace_may_not_use(policy):
    """Attack: a serving-only namespace writes its own runtime patch selecting the training pool."""
    steer = user_patch(
        nodeSelector={"workload": "gpu-train"},
        tolerations=[
            {"key": "workload", "operator": "Equal", "value": "gpu-train", "effect": "NoSchedule"},
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        ],
    )
    raw = trainjob(meta={}, patches=[steer], resourcesPerNode={"limits": {"nvidia.com/gpu": "8"}})
    d = run(policy, raw, labels={"kubernetes.io/metadata.name": "web", **SERVING_NS})
    assert not d.allowed
    assert {"class-not-allowed", "pool-spoofing"} & set(rules(d)), [v.render() for v in d.violations]


def test_a_privileged_runtime_patch_on_a_sliced_pool_is_privileged_gpu(policy):
    """Attack: the GPU container made privileged through the patch reaches every MIG slice of the card."""
    meta = {"labels": {"gpu-admission.io/workload": "inference"}, "annotations": {"gpu-admission.io/gpu-memory": "5Gi"}}
    priv = user_patch(containers=[{"name": "node", "securityContext": {"privileged": True}}])
    d = run(policy, trainjob(meta=meta, patches=[priv], numNodes=1), labels={"kubernetes.io/metadata.name": "web"})
    assert "privileged-gpu" in rules(d), [v.render() for v in d.violations]


DRA_POLICY = """
apiVersion: gpu-admission.io/v1
kind: GPUPolicy
metadata: {name: dra}
spec:
  pools:
    dra-h100:
      gpuModel: H100-80GB
      gpusPerNode: 8
      nodeSelector: {workload: gpu-dra}
      isolation: [exclusive]
      dra: {deviceClasses: {exclusive: gpu.nvidia.com}}
  classes:
    draining: {pools: [dra-h100], isolation: {default: exclusive}}
  namespaces:
    - {selector: {}, classes: [draining]}
"""


def test_a_pool_that_needs_resource_claims_is_denied_for_a_trainjob_saying_why():
    policy = load_policy_texts([("dra.yaml", DRA_POLICY)])
    meta = {"labels": {"gpu-admission.io/workload": "draining"}, "annotations": {"gpu-admission.io/gpus": "2"}}
    d = report(policy, Request(trainjob(meta=meta), namespace="team-a"))
    v = violation(d, "intent-invalid")
    assert "resourceClaims" in v.message and "cannot set" in v.message and "runtime" in v.message
    assert not d.allowed
    assert all("resourceClaims" not in op["path"] for op in d.patch), "nothing a TrainJob cannot hold is written"


# --- queues: Volcano and KAI keys where each kind's integration reads them ------------------------


def _policy(backend: str, **gang: Any):
    doc = yaml.safe_load((POLICIES / "default.yaml").read_text())
    doc["spec"]["classes"]["training"]["gang"].update({"backend": backend, **gang})
    return load_policy_texts([("default.yaml", yaml.safe_dump(doc))])


def vcjob_train() -> dict:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "vc"},
        "spec": {"minAvailable": 2, "tasks": [{"name": "w", "replicas": 2, "template": tpl({"labels": TRAIN_LABELS})}]},
    }


def batch_job() -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"parallelism": 2, "completions": 2, "template": tpl({"labels": TRAIN_LABELS}, restartPolicy="Never")},
    }


def gang_pods() -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p0",
            "labels": TRAIN_LABELS,
            "annotations": {"gpu-admission.io/gang": "g1", "gpu-admission.io/gang-size": "2"},
        },
        "spec": {"containers": [container()]},
    }


def _at(obj: dict, path: tuple) -> Any:
    for part in path:
        obj = obj[part]
    return obj


VOLCANO_QUEUE = {
    "Pod": (gang_pods, ("metadata", "annotations", "scheduling.volcano.sh/queue-name")),
    "Job": (batch_job, ("spec", "template", "metadata", "annotations", "scheduling.volcano.sh/queue-name")),
    "VolcanoJob": (vcjob_train, ("spec", "queue")),
    "PyTorchJob": (pytorchjob, ("spec", "runPolicy", "schedulingPolicy", "queue")),
    "TFJob": (tfjob, ("spec", "runPolicy", "schedulingPolicy", "queue")),
    "MPIJob": (mpijob, ("spec", "runPolicy", "schedulingPolicy", "queue")),
    "LeaderWorkerSet": (lws, ("metadata", "annotations", "scheduling.volcano.sh/queue-name")),
    "RayCluster": (raycluster, ("metadata", "labels", "volcano.sh/queue-name")),
    "RayJob": (rayjob, ("metadata", "labels", "volcano.sh/queue-name")),
    "TrainJob": (trainjob, ("metadata", "annotations", "scheduling.volcano.sh/queue-name")),
}


@pytest.mark.parametrize("name", sorted(VOLCANO_QUEUE))
def test_the_volcano_queue_goes_where_each_kinds_volcano_integration_reads_it(name):
    policy = _policy("volcano", queue="research")
    make, path = VOLCANO_QUEUE[name]
    d = run(policy, make(), training=True)
    assert d.allowed, [v.render() for v in d.violations]
    assert _at(d.mutated, path) == "research"
    assert schema_errors(d.mutated) == []


def test_without_a_queue_nothing_is_written_and_volcano_uses_its_default(policy):
    d = run(policy, pytorchjob(), training=True)
    assert "queue" not in d.mutated["spec"]["runPolicy"]["schedulingPolicy"]


def test_a_namespace_rules_queue_overrides_the_classs():
    doc = yaml.safe_load((POLICIES / "default.yaml").read_text())
    doc["spec"]["classes"]["training"]["gang"]["queue"] = "shared"
    doc["spec"]["namespaces"].insert(
        0,
        {
            "name": "team-a",
            "selector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}},
            "classes": ["training"],
            "queue": "team-a",
        },
    )
    policy = load_policy_texts([("default.yaml", yaml.safe_dump(doc))])
    assert run(policy, vcjob_train(), training=True).mutated["spec"]["queue"] == "team-a"
    other = run(policy, vcjob_train(), training=True, namespace="team-b")
    assert other.mutated["spec"]["queue"] == "shared"


def test_a_queue_the_user_chose_is_kept():
    policy = _policy("volcano", queue="research")
    obj = vcjob_train()
    obj["spec"]["queue"] = "mine"
    assert run(policy, obj, training=True).mutated["spec"]["queue"] == "mine"


KAI_KINDS = {
    "Pod": gang_pods,
    "Job": batch_job,
    "PyTorchJob": pytorchjob,
    "MPIJob": mpijob,
    "JobSet": jobset,
    "LeaderWorkerSet": lws,
    "RayCluster": raycluster,
    "RayJob": rayjob,
    "TrainJob": trainjob,
}


@pytest.mark.parametrize("name", sorted(KAI_KINDS))
def test_under_kai_the_queue_label_is_on_the_top_owner_and_every_template_names_kai_scheduler(name):
    policy = _policy("kai", queue="team-a")
    d = run(policy, KAI_KINDS[name](), training=True)
    assert d.allowed, [v.render() for v in d.violations]
    out = d.mutated
    assert out["metadata"]["labels"]["kai.scheduler/queue"] == "team-a"  # KAI reads the top owner first
    kind = classify(out)
    for t in templates(out, kind):
        if t.gang and not t.virtual:
            assert t.spec["schedulerName"] == "kai-scheduler", t.dotted()
    assert schema_errors(out) == []


def test_under_kai_a_batch_job_gets_its_gang_size_and_its_pods_the_queue():
    d = run(_policy("kai", queue="team-a"), batch_job(), training=True)
    assert d.mutated["metadata"]["annotations"]["kai.scheduler/batch-min-member"] == "2"
    assert d.mutated["spec"]["template"]["metadata"]["labels"]["kai.scheduler/queue"] == "team-a"
    bad = batch_job()
    bad["metadata"]["annotations"] = {"kai.scheduler/batch-min-member": "1"}
    v = violation(run(_policy("kai"), bad, training=True), "gang-incomplete")
    assert "kai.scheduler/batch-min-member" in v.path


def test_under_kai_a_partial_kubeflow_gang_is_gang_incomplete():
    obj = pytorchjob(runPolicy={"schedulingPolicy": {"minAvailable": 2}})
    v = violation(run(_policy("kai"), obj, training=True), "gang-incomplete")
    assert v.path == "spec.runPolicy.schedulingPolicy.minAvailable"


def test_under_kai_a_volcano_job_is_gang_required_naming_a_backend_that_can():
    d = run(_policy("kai"), vcjob_train(), training=True)
    v = violation(d, "gang-required")
    assert "kai has no integration for VolcanoJob" in v.message and "volcano" in v.message


def test_under_kai_a_user_set_kai_scheduler_is_kept_and_the_gang_is_complete():
    policy = _policy("kai")
    obj = pytorchjob()
    for spec in obj["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["schedulerName"] = "kai-scheduler"
    d = run(policy, obj, training=True)
    assert d.allowed, [v.render() for v in d.violations]
    assert "gang-required" not in rules(d)
