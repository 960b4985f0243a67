"""The mutation table, row by row: what each intent becomes, with exact resulting fields (and the craft rules)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.engine.helpers import (
    assert_valid,
    container,
    intent,
    job,
    limits,
    mutated,
    pod,
    rules,
    run,
    template_meta,
    template_spec,
    vcjob,
    violation,
)
from webhook.engine import Request, explain, mutate, report
from webhook.policy import load_policy

PROVIDERS = Path(__file__).parent / "policies" / "providers.yaml"


@pytest.fixture(scope="module")
def providers():
    return load_policy(PROVIDERS)


# --- exclusive / MIG / shared -------------------------------------------------------------------


def test_exclusive_n_gpus_become_nvidia_gpu_limit(policy):
    d = run(policy, pod(intent("training", gpus=4)), training=True)
    assert d.allowed, d.message
    out = mutated(d)
    assert limits(out) == {"nvidia.com/gpu": "4", "rdma/rdma_shared_device_a": "1"}
    assert_valid(out)


# The default pool runs mig-parted's all-balanced layout (2 x 1g.5gb, 1 x 2g.10gb, 1 x 3g.20gb per GPU) and a
# profile holds what `nvidia-smi mig -lgip` lists (1g.5gb 4.75Gi, 2g.10gb 9.625Gi, 3g.20gb 19.5Gi), not the
# number in its name: 5Gi no longer fits a 1g.5gb, and 6-9Gi get the 2g.10gb the nodes have, not a 1g.10gb.
@pytest.mark.parametrize(
    ("memory", "resource"),
    [
        ("4Gi", "nvidia.com/mig-1g.5gb"),
        ("4864Mi", "nvidia.com/mig-1g.5gb"),  # exactly the 1g.5gb's usable memory
        ("4865Mi", "nvidia.com/mig-2g.10gb"),
        ("5Gi", "nvidia.com/mig-2g.10gb"),
        ("6Gi", "nvidia.com/mig-2g.10gb"),  # all-balanced has no 1g.10gb
        ("4096Mi", "nvidia.com/mig-1g.5gb"),
        ("20G", "nvidia.com/mig-3g.20gb"),  # 20e9 bytes = 18.6Gi
        ("19968Mi", "nvidia.com/mig-3g.20gb"),
    ],
)
def test_mig_mixed_picks_smallest_profile_that_holds_the_memory(policy, memory, resource):
    d = run(policy, pod(intent("inference", gpu_memory=memory)))
    assert limits(mutated(d)) == {resource: "1"}
    assert any(
        resource in line for line in explain(policy, Request(pod(intent("inference", gpu_memory=memory)))).explanation
    )


@pytest.mark.parametrize("memory", ["20Gi", "21Gi", "41Gi"])
def test_mig_memory_larger_than_every_profile_is_denied(policy, memory):
    """Above the largest profile the nodes carry (3g.20gb, 19.5Gi): denied with what fits, never a 7g.40gb
    the all-balanced nodes do not advertise (the old translation gave one for 21-40Gi)."""
    d = run(policy, pod(intent("inference", gpu_memory=memory)))
    v = violation(d, "gpu-memory-exceeded")
    assert "largest 3g.20gb: 19968Mi" in v.message and "ask for at most 19968Mi" in v.message
    assert v.path == "metadata.annotations[gpu-admission.io/gpu-memory]"
    assert not d.allowed


def test_mig_single_strategy_uses_gpu_and_product_selector(providers):
    d = run(providers, pod(intent("mig-single", gpu_memory="8Gi")))
    out = mutated(d)
    assert limits(out) == {"nvidia.com/gpu": "1"}
    assert template_spec(out)["nodeSelector"] == {
        "pool": "mig-single",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.10gb",
    }


@pytest.mark.parametrize(("memory", "gib"), [("4Gi", "4"), ("4.5Gi", "5"), ("3000Mi", "3"), ("1G", "1")])
def test_shared_aliyun_cgpu_is_gib_rounded_up(policy, memory, gib):
    d = run(policy, pod(intent("dev", gpu_memory=memory)))
    assert limits(mutated(d)) == {"aliyun.com/gpu-mem": gib}
    assert d.allowed


def test_shared_hami_is_one_gpu_plus_mib_and_cores(providers):
    d = run(providers, pod(intent("hami", gpu_memory="4Gi")))
    assert limits(mutated(d)) == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "30"}


def test_shared_volcano_vgpu_is_number_plus_mib_and_volcano_scheduler(providers):
    d = run(providers, pod(intent("vgpu", gpu_memory="3000Mi")))
    out = mutated(d)
    assert limits(out) == {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000"}
    assert out["spec"]["schedulerName"] == "volcano"


def test_shared_tencent_qgpu_is_gib(providers):
    d = run(providers, pod(intent("qgpu", gpu_memory="2.5Gi")))
    assert limits(mutated(d)) == {"tke.cloud.tencent.com/qgpu-memory": "3"}


def test_time_slicing_renamed_and_plain(providers):
    renamed = run(providers, pod(intent("ts-renamed")))
    plain = run(providers, pod(intent("ts-plain")))
    assert limits(mutated(renamed)) == {"nvidia.com/gpu.shared": "1"}
    assert limits(mutated(plain)) == {"nvidia.com/gpu": "1"}


def test_user_gpu_keys_are_replaced_in_limits_and_requests(policy):
    """A rewritten key's request goes too, or the apiserver rejects requests != limits (R3/R4)."""
    c = container(limits={"nvidia.com/gpu": "1", "cpu": "2"}, requests={"nvidia.com/gpu": "1", "cpu": "1"})
    d = run(policy, pod(intent("inference", gpu_memory="4Gi"), [c]))
    res = template_spec(mutated(d))["containers"][0]["resources"]
    assert res["limits"] == {"cpu": "2", "nvidia.com/mig-1g.5gb": "1"}
    assert res["requests"] == {"cpu": "1"}  # defaulting copies the new limit into requests
    assert_valid(mutated(d))


def test_existing_request_for_the_same_key_gets_the_new_value(policy):
    # a MIG class rewrites the user's whole GPU to its slice, in limits and in requests alike
    c = container(limits={"nvidia.com/gpu": "1"}, requests={"nvidia.com/gpu": "1"})
    d = run(policy, pod(intent("inference", gpu_memory="4Gi"), [c]))
    res = template_spec(mutated(d))["containers"][0]["resources"]
    assert res["limits"] == {"nvidia.com/mig-1g.5gb": "1"} and "nvidia.com/gpu" not in res.get("requests", {})
    # the same count in the intent and the resources: requests alone get their limit
    c = container(requests={"nvidia.com/gpu": "8"})
    d = run(policy, pod(intent("training", gpus=8), [c]), training=True)
    res = template_spec(mutated(d))["containers"][0]["resources"]
    assert res["limits"]["nvidia.com/gpu"] == "8" and res["requests"]["nvidia.com/gpu"] == "8"
    # a different count is a conflict the user settles (tests/engine/test_class_gpu_count.py), never a rewrite


def test_an_init_container_is_never_the_gpu_container(policy):
    # an init container would hand its slice back before the app runs (or, as a native sidecar, keep it
    # beside the app): the intent is refused, and no mutation puts the devices on the init container
    meta = intent("inference", gpu_memory="4Gi", container="warmup")
    p = pod(meta, [container("app")], initContainers=[container("warmup")])
    d = run(policy, p)
    assert "intent-invalid" in rules(d) and not d.allowed
    assert "resources" not in mutated(d)["spec"]["initContainers"][0]


def test_the_named_container_gets_the_gpus(policy):
    meta = intent("inference", gpu_memory="4Gi", container="model")
    out = mutated(run(policy, pod(meta, [container("proxy"), container("model")])))
    assert out["spec"]["containers"][1]["resources"]["limits"] == {"nvidia.com/mig-1g.5gb": "1"}
    assert "resources" not in out["spec"]["containers"][0]


# --- pool ------------------------------------------------------------------------------------------


def test_pool_selector_and_tolerations_are_merged_not_replaced(policy):
    p = pod(
        intent("inference", gpu_memory="4Gi"),
        nodeSelector={"disk": "ssd"},
        tolerations=[
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "spot", "operator": "Exists"},
        ],
    )
    d = run(policy, p)
    spec = template_spec(mutated(d))
    assert spec["nodeSelector"] == {"disk": "ssd", "workload": "gpu-infer"}
    assert spec["tolerations"] == p["spec"]["tolerations"]  # the pool's toleration was already there
    assert {"op": "add", "path": "/spec/nodeSelector/workload", "value": "gpu-infer"} in d.patch


def test_conflicting_user_selector_is_denied_not_overwritten(policy):
    d = run(policy, pod(intent("inference", gpu_memory="4Gi"), nodeSelector={"workload": "gpu-dev"}))
    v = violation(d, "pool-spoofing")
    assert "workload=gpu-dev conflicts" in v.message
    assert d.patch == () or all("nodeSelector" not in op["path"] for op in d.patch)


# --- class scheduling ------------------------------------------------------------------------------


def test_priority_class_added_and_defaulted_priority_removed(policy):
    d = run(policy, pod(intent("batch", gpu_memory="10Gi"), priority=0, schedulerName="default-scheduler"))
    spec = template_spec(mutated(d))
    assert spec["priorityClassName"] == "gpu-batch-preemptible"
    assert "priority" not in spec
    assert {"op": "remove", "path": "/spec/priority"} in d.patch


def test_user_priority_class_and_scheduler_are_kept(policy):
    d = run(policy, pod(intent("batch", gpu_memory="10Gi"), priorityClassName="mine"))
    assert template_spec(mutated(d))["priorityClassName"] == "mine"


# --- RDMA ------------------------------------------------------------------------------------------


def test_rdma_injects_networks_device_ipc_lock_shm_and_nccl_env(policy):
    c = container(
        env=[{"name": "NCCL_IB_HCA", "value": "mlx5_0"}], securityContext={"capabilities": {"add": ["SYS_PTRACE"]}}
    )
    d = run(policy, pod(intent("training", gpus=8), [c]), training=True)
    out = mutated(d)
    spec = template_spec(out)
    ctr = spec["containers"][0]
    assert out["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "rdma-net-a@net1"
    assert ctr["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"
    assert ctr["securityContext"]["capabilities"]["add"] == ["SYS_PTRACE", "IPC_LOCK"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in ctr["volumeMounts"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}} in spec["volumes"]
    env = {e["name"]: e["value"] for e in ctr["env"]}
    assert env["NCCL_IB_HCA"] == "mlx5_0"  # the user's value wins
    assert env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert {
        "op": "add",
        "path": "/spec/containers/0/resources/limits/rdma~1rdma_shared_device_a",
        "value": "1",
    } in d.patch
    assert_valid(out)


@pytest.mark.parametrize(
    ("existing", "expected"),
    [
        ("other-net", "other-net,rdma-net-a@net1"),
        ("other-net, rdma-net-a@net1", None),
        ("ns1/rdma-net-a@net1", None),
        (
            '[{"name":"macvlan-conf","ips":["10.1.1.101/24"]}]',
            '[{"name":"macvlan-conf","ips":["10.1.1.101/24"]},{"name":"rdma-net-a","interface":"net1"}]',
        ),
        ('[{"name":"rdma-net-a","interface":"net1"}]', None),
    ],
)
def test_multus_networks_merge_in_both_formats(policy, existing, expected):
    meta = intent("training", gpus=8)
    meta["annotations"]["k8s.v1.cni.cncf.io/networks"] = existing
    out = mutated(run(policy, pod(meta), training=True))
    got = out["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
    assert got == (expected or existing)
    if expected and expected.startswith("["):
        assert json.loads(got)[0] == json.loads(existing)[0]


def test_existing_dev_shm_mount_is_left_alone(policy):
    c = container(volumeMounts=[{"name": "mine", "mountPath": "/dev/shm"}])
    out = mutated(
        run(policy, pod(intent("training", gpus=8), [c], volumes=[{"name": "mine", "emptyDir": {}}]), training=True)
    )
    spec = template_spec(out)
    assert spec["volumes"] == [{"name": "mine", "emptyDir": {}}]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "mine", "mountPath": "/dev/shm"}]


def test_rdma_false_intent_skips_rdma(policy):
    out = mutated(run(policy, pod(intent("training", gpus=8, rdma="false")), training=True))
    assert "annotations" not in out["metadata"] or "k8s.v1.cni.cncf.io/networks" not in out["metadata"]["annotations"]
    assert "rdma/rdma_shared_device_a" not in limits(out)


# --- gang --------------------------------------------------------------------------------------------


def test_volcano_job_gets_volcano_scheduler_and_full_gang(policy):
    d = run(policy, vcjob(intent("training"), replicas=8, min_available=None), training=True)
    out = mutated(d)
    assert out["spec"]["schedulerName"] == "volcano"
    assert out["spec"]["minAvailable"] == 8
    assert d.allowed, d.message
    assert_valid(out)


def test_batch_job_gets_template_scheduler_and_group_min_member(policy):
    d = run(policy, job(intent("training", gpus=8), parallelism=4), training=True)
    out = mutated(d)
    assert out["spec"]["template"]["spec"]["schedulerName"] == "volcano"
    assert out["metadata"]["annotations"]["scheduling.volcano.sh/group-min-member"] == "4"
    assert_valid(out)


def test_bare_pods_get_volcano_group_name(policy):
    meta = intent("training", gpus=8, gang="llm-a", gang_size=2)
    out = mutated(run(policy, pod(meta), training=True))
    assert out["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "llm-a"
    assert out["spec"]["schedulerName"] == "volcano"


def test_kueue_gang_labels_and_queue_from_namespace(providers):
    meta = intent("kueue-train", gang="g1", gang_size=3)
    d = run(providers, pod(meta), labels={"queue": "team"})
    out = mutated(d)
    assert out["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-queue"
    assert out["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == "g1"
    assert out["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "3"
    j = mutated(run(providers, job(intent("kueue-train"), parallelism=2)))
    assert j["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "class-queue"


def test_coscheduling_gang_label(providers):
    out = mutated(run(providers, job(intent("cosched-train"), parallelism=3)))
    meta = out["spec"]["template"]["metadata"]
    assert meta["labels"]["scheduling.x-k8s.io/pod-group"] == "train"
    assert out["spec"]["template"]["spec"]["schedulerName"] == "scheduler-plugins-scheduler"


# --- topology ----------------------------------------------------------------------------------------


def test_topology_preferred_terms_fine_to_coarse(policy):
    out = mutated(run(policy, job(intent("training", gpus=8), parallelism=4), training=True))
    terms = out["spec"]["template"]["spec"]["affinity"]["podAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert [(t["weight"], t["podAffinityTerm"]["topologyKey"]) for t in terms] == [
        (100, "kubernetes.io/hostname"),
        (50, "network.topology.nvidia.com/leaf"),
    ]
    assert terms[0]["podAffinityTerm"]["labelSelector"] == {"matchLabels": {"batch.kubernetes.io/job-name": "train"}}


def test_topology_required_and_volcano_network_topology(policy):
    meta = intent("training", topology="switch:required")
    out = mutated(run(policy, vcjob(meta), training=True))
    affinity = template_spec(out)["affinity"]["podAffinity"]
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {
            "labelSelector": {"matchLabels": {"volcano.sh/job-name": "train-qwen"}},
            "topologyKey": "network.topology.nvidia.com/leaf",
        }
    ]
    assert out["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}


def test_topology_kueue_tas_annotation(providers):
    out = mutated(run(providers, job(intent("kueue-train"), parallelism=4)))
    assert (
        out["spec"]["template"]["metadata"]["annotations"]["kueue.x-k8s.io/podset-preferred-topology"]
        == "topology.example.com/rack"
    )


def test_topology_none_and_single_pod_add_nothing(policy):
    out = mutated(run(policy, job(intent("training", topology="none"), parallelism=4), training=True))
    assert "affinity" not in out["spec"]["template"]["spec"]
    single = mutated(run(policy, job(intent("training"), parallelism=1), training=True))
    assert "affinity" not in single["spec"]["template"]["spec"]


# --- craft rules -------------------------------------------------------------------------------------


def test_update_is_never_mutated(policy):
    d = run(policy, pod(intent("inference", gpu_memory="4Gi")), operation="UPDATE")
    assert d.patch == ()


def test_controllers_are_validated_not_mutated(policy):
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {
                    "labels": {"a": "b", "gpu-admission.io/workload": "inference"},
                    "annotations": {"gpu-admission.io/gpu-memory": "99Gi"},
                },
                "spec": {"containers": [container()]},
            },
        },
    }
    d = run(policy, dep)
    assert d.patch == () and "gpu-memory-exceeded" in rules(d)


def test_missing_parents_are_added_and_existing_maps_never_replaced(policy):
    bare = run(policy, pod(intent("inference", gpu_memory="4Gi")))
    assert {"op": "add", "path": "/spec/nodeSelector", "value": {"workload": "gpu-infer"}} in bare.patch
    with_selector = run(policy, pod(intent("inference", gpu_memory="4Gi"), nodeSelector={"a": "b"}))
    assert not any(op["path"] == "/spec/nodeSelector" for op in with_selector.patch)


def test_second_webhook_changes_are_preserved(policy):
    """Kueue/Volcano mutate after us; re-invocation (IfNeeded) must keep their fields and patch nothing."""
    first = mutated(run(policy, job(intent("training", gpus=8), parallelism=4), training=True))
    first["spec"]["suspend"] = True
    first["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = "q"
    first["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/topology"}]
    again = run(policy, first, training=True)
    assert again.patch == ()
    assert again.allowed, again.message


def test_template_metadata_overrides_job_level_intent(policy):
    j = job(intent("training", gpus=2), job_meta=intent("training", gpus=8), parallelism=2)
    out = mutated(run(policy, j, training=True))
    assert limits(out)["nvidia.com/gpu"] == "2"
    fallback = job({}, job_meta=intent("training", gpus=8), parallelism=2)
    assert limits(mutated(run(policy, fallback, training=True)))["nvidia.com/gpu"] == "8"


def test_opt_out_task_of_a_volcano_job(policy):
    master = {
        "name": "master",
        "replicas": 1,
        "template": {
            "metadata": {"labels": {"gpu-admission.io/workload": "none"}},
            "spec": {"containers": [container("launcher")]},
        },
    }
    worker = {"name": "worker", "replicas": 2, "template": {"spec": {"containers": [container("w")]}}}
    obj = vcjob(job_meta=intent("training", gpus=8), tasks=[master, worker], min_available=3)
    out = mutated(run(policy, obj, training=True))
    assert "resources" not in out["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    assert out["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert_valid(out)


def test_non_gpu_object_is_untouched(policy):
    d = report(policy, Request(pod({"labels": {"app": "web"}})))
    assert not d.relevant and d.patch == () and d.violations == ()


def test_intent_on_metadata_of_the_pod_template_reads_label_from_template(policy):
    out = mutated(run(policy, job(intent("inference", gpu_memory="4Gi"), parallelism=1)))
    assert template_meta(out)["labels"]["gpu-admission.io/workload"] == "inference"
    assert limits(out) == {"nvidia.com/mig-1g.5gb": "1"}


def test_explanation_names_every_step_and_placements_are_structured(policy):
    d = explain(
        policy,
        Request(vcjob(intent("training")), namespace="llm", namespace_labels={"gpu-admission.io/tier": "training"}),
    )
    text = "\n".join(d.explanation)
    assert "isolation exclusive (class default)" in text
    assert "scheduling: priorityClassName gpu-training" in text
    assert "rdma: pool train-h100: networks rdma-net-a@net1, rdma/rdma_shared_device_a: 1, IPC_LOCK" in text
    assert "gang: volcano set /spec/schedulerName" in text
    assert (
        "topology switch: podAffinity kubernetes.io/hostname (100); network.topology.nvidia.com/leaf (50); "
        "volcano networkTopology soft tier 1" in text
    )
    (placement,) = d.placements
    assert (placement.template, placement.class_name, placement.pool, placement.isolation) == (
        "spec.tasks[0].template",
        "training",
        "train-h100",
        "exclusive",
    )
    assert placement.resources == {"nvidia.com/gpu": "1"}


def test_patch_only_mode_skips_rules_but_builds_the_same_patch(policy):
    obj = pod(intent("inference", gpu_memory="4Gi"))
    full, patch_only = report(policy, Request(obj)), mutate(policy, Request(obj))
    assert patch_only.patch == full.patch and patch_only.violations == () and full.violations
