"""Issue 11, read as an attacker who may create Pods in one namespace (default policy, a serving
namespace: entitled to inference and batch, so to pool infer-a100, never train-h100 or dev-cgpu).

Each test is one way onto nodes or devices beyond the grant. The admission path is emulated as the
apiserver runs it: ``/mutate`` (our patch applied with jsonpatch), then ``/validate`` on the stored
object (``Stage.STORED``). A test passes when the attack is denied, or when what gets stored can no
longer reach the pool (the raw request was pinned)."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from tests.conftest import POLICIES
from tests.engine.helpers import container, intent, job, pod, rules, violation
from webhook.engine import Request, Stage, mutate, report

GPU1 = {"nvidia.com/gpu": "1"}
BLANKET = [{"operator": "Exists"}]
TRAIN_TAINTS = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "workload", "operator": "Equal", "value": "gpu-train", "effect": "NoSchedule"},
]


SERVING = {"gpu-admission.io/tier": "serving"}
SANDBOX = {"gpu-admission.io/tier": "sandbox"}  # entitled to dev only (the cGPU pool)


def admit(policy, obj, labels=SERVING, namespace="team-a", **kw):
    """/mutate, patch applied, then /validate on the stored object: (decision at /validate, stored object)."""
    m = mutate(policy, Request(obj, namespace=namespace, namespace_labels=labels, **kw))
    stored = jsonpatch.apply_patch(copy.deepcopy(obj), list(m.patch)) if m.patch else copy.deepcopy(obj)
    v = report(policy, Request(stored, namespace=namespace, namespace_labels=labels, stage=Stage.STORED, **kw))
    return v, stored


def affinity(*terms):
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def expr(key, op, *values):
    e = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return e


def train_selector(stored):
    spec = stored["spec"]
    return spec.get("nodeSelector", {}).get("workload")


# --- item 2: raw GPU requests reach any pool --------------------------------------------------------------

RAW_ATTACKS = {
    "blanket toleration": {"tolerations": BLANKET},
    "toleration without effect": {
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}, {"key": "workload", "operator": "Exists"}]
    },
    "NotIn": {
        "tolerations": BLANKET,
        "affinity": affinity({"matchExpressions": [expr("workload", "NotIn", "gpu-infer")]}),
    },
    "Exists": {"tolerations": BLANKET, "affinity": affinity({"matchExpressions": [expr("workload", "Exists")]})},
    "DoesNotExist": {
        "tolerations": BLANKET,
        "affinity": affinity({"matchExpressions": [expr("zone", "DoesNotExist")]}),
    },
    "matchFields": {
        "tolerations": BLANKET,
        "affinity": affinity({"matchFields": [expr("metadata.name", "In", "h100-node-03")]}),
    },
    "hostname selector": {"tolerations": TRAIN_TAINTS, "nodeSelector": {"kubernetes.io/hostname": "h100-node-03"}},
    "exact taints, no selector": {"tolerations": TRAIN_TAINTS},
}


@pytest.mark.parametrize("attack", sorted(RAW_ATTACKS))
def test_raw_request_cannot_keep_a_way_onto_the_training_pool(policy, attack):
    obj = pod({}, [container(limits={"nvidia.com/gpu": "8"})], **copy.deepcopy(RAW_ATTACKS[attack]))
    d, stored = admit(policy, obj)
    if d.allowed:  # pinned: the stored pod carries an entitled pool's selector
        assert train_selector(stored) == "gpu-infer", stored["spec"]
    else:
        assert "pool-spoofing" in rules(d)


@pytest.mark.parametrize("attack", sorted(RAW_ATTACKS))
def test_raw_request_in_deny_mode_is_denied(deny_raw_policy, attack):
    obj = pod({}, [container(limits={"nvidia.com/gpu": "8"})], **copy.deepcopy(RAW_ATTACKS[attack]))
    d, _ = admit(deny_raw_policy, obj)
    v = violation(d, "pool-spoofing")
    assert "train-h100" in v.message and not d.allowed


def test_resource_only_the_dev_pool_offers_from_a_serving_namespace(policy):
    # serving-teams are entitled to inference and batch only: dev-cgpu is the one pool offering gpu-mem
    obj = pod({}, [container(limits={"aliyun.com/gpu-mem": "8"})], tolerations=BLANKET)
    d, _ = admit(policy, obj, labels={"gpu-admission.io/tier": "serving"})
    assert not d.allowed
    v = violation(d, "pool-spoofing")
    assert "dev-cgpu" in v.message


def test_raw_daemonset_reaches_every_pool_it_tolerates(policy):
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "gpu-burn"},
        "spec": {
            "selector": {"matchLabels": {"app": "burn"}},
            "template": {
                "metadata": {"labels": {"app": "burn"}},
                "spec": {"tolerations": BLANKET, "containers": [container(limits=GPU1)]},
            },
        },
    }
    d = report(policy, Request(ds, namespace="team-a", namespace_labels=SERVING))
    assert "pool-spoofing" in rules(d) and not d.allowed
    ok = copy.deepcopy(ds)
    ok["spec"]["template"]["spec"]["nodeSelector"] = {"workload": "gpu-infer"}
    assert "pool-spoofing" not in rules(report(policy, Request(ok, namespace="team-a", namespace_labels=SERVING)))


# found by the scheduler oracle (tests/oracle): Kubernetes 1.35's TaintTolerationComparisonOperators lets a
# toleration compare numerically (operator Gt/Lt); the reach model read them as tolerating nothing, so a
# pod that is not pinned (a DaemonSet's, or one claiming a DaemonSet owner, which anyone may write) kept
# a way onto a pool whose taint value is numeric or not fixed by the policy.
GT_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Gt", "value": "3", "effect": "NoSchedule"}]
SANDBOX = {"gpu-admission.io/tier": "sandbox"}  # entitled to dev-cgpu only
FAKE_DAEMONSET_OWNER = [
    {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": "fake",
        "uid": "0d5e7d4e-0000-4000-8000-00000000dead",
        "controller": True,
    }
]


def test_numeric_toleration_operator_reaches_a_pool_from_a_daemonset(policy):
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "gpu-burn"},
        "spec": {
            "selector": {"matchLabels": {"app": "burn"}},
            "template": {
                "metadata": {"labels": {"app": "burn"}},
                "spec": {"tolerations": GT_TOLERATION, "containers": [container(limits=GPU1)]},
            },
        },
    }
    d = report(policy, Request(ds, namespace="team-a", namespace_labels=SANDBOX))
    v = violation(d, "pool-spoofing")
    assert "infer-a100" in v.message and not d.allowed


def test_numeric_toleration_operator_on_a_pod_claiming_a_daemonset_owner(policy):
    obj = pod({"ownerReferences": FAKE_DAEMONSET_OWNER}, [container(limits=GPU1)], tolerations=GT_TOLERATION)
    d, _ = admit(policy, obj, labels=SANDBOX)
    assert not d.allowed and "pool-spoofing" in rules(d)


def test_numeric_toleration_operator_against_known_nodes(policy):
    from webhook.engine.model.cluster import Cluster

    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "a100-1", "labels": {"workload": "gpu-infer"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "5", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }
    obj = pod({"ownerReferences": FAKE_DAEMONSET_OWNER}, [container(limits=GPU1)], tolerations=GT_TOLERATION)
    d, _ = admit(policy, obj, labels=SANDBOX, cluster=Cluster(nodes=(node,)))
    assert not d.allowed and "pool-spoofing" in rules(d)
    # 5 > 5 is false: this toleration does not tolerate the node the pod names (as a DaemonSet's pod does)
    above = [{**GT_TOLERATION[0], "value": "5"}]
    named = affinity({"matchFields": [expr("metadata.name", "In", "a100-1")]})
    obj = pod({"ownerReferences": FAKE_DAEMONSET_OWNER}, [container(limits=GPU1)], tolerations=above, affinity=named)
    d, _ = admit(policy, obj, labels=SANDBOX, cluster=Cluster(nodes=(node,)))
    assert "pool-spoofing" not in rules(d), [v.render() for v in d.violations]


# found by the scheduler oracle (tests/oracle, nodes that join after admission): with Node objects known,
# a pool was judged only by its nodes of the moment, so a pod excluding today's nodes by hostname (NotIn)
# or by a label they happen to lack was admitted, and bound to the next node of the pool to join (a
# replacement, or a scale-up the pending pod itself triggers through the cluster autoscaler).
H100_NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "h100-01", "labels": {"workload": "gpu-train", "kubernetes.io/hostname": "h100-01"}},
    "spec": {
        "taints": [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "workload", "value": "gpu-train", "effect": "NoSchedule"},
        ]
    },
    "status": {"allocatable": {"nvidia.com/gpu": "8"}},
}


@pytest.mark.parametrize(
    "exclude",
    [
        {"matchExpressions": [expr("kubernetes.io/hostname", "NotIn", "h100-01")]},
        {"matchFields": [expr("metadata.name", "NotIn", "h100-01")]},
        {"matchExpressions": [expr("topology.kubernetes.io/zone", "Exists")]},
    ],
)
def test_nodes_that_join_later_are_reached_too(deny_raw_policy, policy, exclude):
    from webhook.engine.model.cluster import Cluster

    cluster = Cluster(nodes=(H100_NODE,))
    obj = pod({}, [container(limits=GPU1)], tolerations=BLANKET, affinity=affinity(exclude))
    d, _ = admit(deny_raw_policy, obj, cluster=cluster)
    assert not d.allowed and "train-h100" in violation(d, "pool-spoofing").message
    # pinned mode: a pod claiming a DaemonSet owner is not pinned, so it is judged the same way
    owned = pod(
        {"ownerReferences": FAKE_DAEMONSET_OWNER},
        [container(limits=GPU1)],
        tolerations=BLANKET,
        affinity=affinity(exclude),
    )
    d, _ = admit(policy, owned, cluster=cluster)
    assert not d.allowed and "train-h100" in violation(d, "pool-spoofing").message


def test_known_nodes_still_decide_a_pod_that_names_its_node(deny_raw_policy):
    from webhook.engine.model.cluster import Cluster

    cpu = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "cpu-1", "labels": {"kubernetes.io/hostname": "cpu-1"}},
    }
    cluster = Cluster(nodes=(H100_NODE, cpu))
    for placement in (
        {"nodeSelector": {"kubernetes.io/hostname": "cpu-1"}},
        {"affinity": affinity({"matchFields": [expr("metadata.name", "In", "cpu-1")]})},
    ):
        obj = pod({}, [container(limits=GPU1)], tolerations=BLANKET, **placement)
        d, _ = admit(deny_raw_policy, obj, cluster=cluster)
        assert "pool-spoofing" not in rules(d), [v.render() for v in d.violations]
        assert "pool-spoofing" in rules(admit(deny_raw_policy, obj)[0])  # without the nodes: the model


def test_class_pod_with_blanket_toleration_stays_on_its_pool(policy):
    # the mutation pins workload=gpu-infer: the blanket toleration no longer reaches train-h100
    d, stored = admit(policy, pod(intent("inference", gpu_memory="4Gi"), tolerations=BLANKET))
    assert d.allowed, [v.render() for v in d.violations]
    assert train_selector(stored) == "gpu-infer"


def test_class_pod_affinity_or_term_onto_training(policy):
    # OR of terms: the second term selects the training pool while nodeSelector pins gpu-infer -> the
    # nodeSelector still wins (ANDed), so it is not spoofing; but a hostname-only class pod whose
    # selector was removed by a later webhook is (placement-missing covers that, see below).
    aff = affinity({"matchExpressions": [expr("workload", "In", "gpu-train")]})
    d, _ = admit(policy, pod(intent("inference", gpu_memory="4Gi"), affinity=aff, tolerations=TRAIN_TAINTS))
    assert not d.allowed and "pool-spoofing" in rules(d)


# --- item 3: a mutation that fails open ----------------------------------------------------------------------


def test_class_pod_stored_unmutated_is_placement_missing(policy):
    obj = pod(intent("inference", gpu_memory="4Gi"))
    d = report(policy, Request(obj, namespace="team-a", namespace_labels=SERVING, stage=Stage.STORED))
    v = violation(d, "placement-missing")
    assert not d.allowed and "infer-a100" in v.message


def test_later_webhook_removed_the_pool_selector(policy):
    m = mutate(
        policy,
        Request(
            pod(intent("training", gpus=8), [container()]),
            namespace="t",
            namespace_labels={"gpu-admission.io/tier": "training"},
        ),
    )
    stored = jsonpatch.apply_patch(pod(intent("training", gpus=8), [container()]), list(m.patch))
    del stored["spec"]["nodeSelector"]
    d = report(
        policy,
        Request(stored, namespace="t", namespace_labels={"gpu-admission.io/tier": "training"}, stage=Stage.STORED),
    )
    v = violation(d, "placement-missing")
    assert v.path == "spec.nodeSelector" and "workload=gpu-train" in v.message


def test_a_pool_toleration_removed_or_respelled_after_our_mutation(policy):
    """The stored tolerations are compared with the pool's as written first, then in normal form: one
    removed by a later webhook is missing; the same toleration respelled (``operator: Equal`` left to
    its default, the list reordered) is not."""
    training = {"gpu-admission.io/tier": "training"}
    sent = pod(intent("training", gpus=8), [container()])
    m = mutate(policy, Request(copy.deepcopy(sent), namespace="t", namespace_labels=training))
    stored = jsonpatch.apply_patch(sent, list(m.patch))
    gpu, workload = stored["spec"]["tolerations"]
    assert workload["operator"] == "Equal"

    removed = copy.deepcopy(stored)
    removed["spec"]["tolerations"] = [gpu]
    d = report(policy, Request(removed, namespace="t", namespace_labels=training, stage=Stage.STORED))
    v = violation(d, "placement-missing")
    assert not d.allowed and v.path == "spec.tolerations" and "workload=gpu-train Equal" in v.message, v.render()

    respelled = copy.deepcopy(stored)
    respelled["spec"]["tolerations"] = [{k: v for k, v in workload.items() if k != "operator"}, gpu]
    d = report(policy, Request(respelled, namespace="t", namespace_labels=training, stage=Stage.STORED))
    assert "placement-missing" not in rules(d), [x.render() for x in d.violations]


def test_raw_request_stored_unpinned_is_placement_missing(policy):
    obj = pod({}, [container(limits=GPU1)])
    d = report(policy, Request(obj, namespace="team-a", namespace_labels=SERVING, stage=Stage.STORED))
    assert "placement-missing" in rules(d) and not d.allowed


def test_properly_mutated_pods_pass_validation(policy):
    for obj, labels in (
        (pod(intent("inference", gpu_memory="4Gi")), None),
        (pod(intent("dev", gpu_memory="4Gi")), {"gpu-admission.io/tier": "sandbox"}),
        (pod({}, [container(limits=GPU1)]), SERVING),
        (job(intent("training", gpus=8), parallelism=None), {}),
    ):
        d, _ = admit(policy, obj, labels=labels)
        assert "placement-missing" not in rules(d), [v.render() for v in d.violations]
        assert "pool-spoofing" not in rules(d), [v.render() for v in d.violations]


# --- item 5: privileged-gpu is pod-scoped ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "make"),
    [
        (
            "whole GPU privileged",
            lambda: pod(intent("inference", isolation="exclusive"), [container(securityContext={"privileged": True})]),
        ),
        (
            "sidecar NVIDIA_VISIBLE_DEVICES=all",
            lambda: pod(
                intent("inference", gpu_memory="4Gi"),
                [container(), container("side", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])],
            ),
        ),
        (
            "init SYS_ADMIN",
            lambda: pod(
                intent("inference", gpu_memory="4Gi"),
                initContainers=[container("init", securityContext={"capabilities": {"add": ["SYS_ADMIN"]}})],
            ),
        ),
        (
            "native sidecar ALL",
            lambda: pod(
                intent("inference", gpu_memory="4Gi"),
                initContainers=[
                    container("log", restartPolicy="Always", securityContext={"capabilities": {"add": ["ALL"]}})
                ],
            ),
        ),
        (
            "hostPath /dev",
            lambda: pod(
                intent("inference", gpu_memory="4Gi"),
                [container(volumeMounts=[{"name": "dev", "mountPath": "/host-dev"}])],
                volumes=[{"name": "dev", "hostPath": {"path": "/dev/"}}],
            ),
        ),
        (
            "ephemeral privileged",
            lambda: pod(
                intent("inference", gpu_memory="4Gi"),
                ephemeralContainers=[{"name": "debug", "image": "busybox", "securityContext": {"privileged": True}}],
            ),
        ),
        (
            "driver capabilities via valueFrom",
            lambda: pod(
                intent("inference", gpu_memory="4Gi"),
                [
                    container(
                        env=[
                            {
                                "name": "NVIDIA_DRIVER_CAPABILITIES",
                                "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}},
                            }
                        ]
                    )
                ],
            ),
        ),
        (
            "CPU-only privileged pod tolerating the MIG pool",
            lambda: pod({}, [container(securityContext={"privileged": True})], tolerations=BLANKET),
        ),
    ],
)
def test_privileged_gpu_attacks(policy, where, make):
    d, _ = admit(policy, make())
    assert "privileged-gpu" in rules(d) and not d.allowed, where


def test_privileged_pod_that_cannot_reach_a_gpu_pool_is_not_our_business(policy):
    d = report(policy, Request(pod({}, [container(securityContext={"privileged": True})]), namespace="team-a"))
    assert not d.relevant


def test_nvidia_visible_devices_none_is_fine(policy):
    c = container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}])
    d, _ = admit(policy, pod(intent("inference", gpu_memory="4Gi"), [c]))
    assert "privileged-gpu" not in rules(d)


# --- item 6: priority and scheduler escalation ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "part"),
    [
        ({"priorityClassName": "gpu-inference"}, "gpu-inference"),
        ({"priorityClassName": "system-node-critical"}, "system-node-critical"),
        ({"schedulerName": "my-scheduler"}, "my-scheduler"),
    ],
)
def test_batch_pod_cannot_escalate_scheduling(policy, spec, part):
    d, _ = admit(policy, pod(intent("batch", gpu_memory="10Gi"), **spec))
    v = violation(d, "scheduling-not-allowed")
    assert part in v.message and not d.allowed


def test_raw_request_with_system_critical_priority(policy):
    d, _ = admit(policy, pod({}, [container(limits=GPU1)], priorityClassName="system-cluster-critical"))
    assert "scheduling-not-allowed" in rules(d)


def test_class_own_priority_and_scheduler_are_allowed(policy):
    d, _ = admit(policy, pod(intent("batch", gpu_memory="10Gi"), priorityClassName="gpu-batch-preemptible"))
    assert "scheduling-not-allowed" not in rules(d)


# --- item 7: class limits count one container ------------------------------------------------------------------


def test_native_sidecar_gpus_add_up(policy):
    side = container("side", limits={"nvidia.com/gpu": "4"}, restartPolicy="Always")
    p = pod(intent("training", gpus=8), [container()], initContainers=[side])
    d, _ = admit(policy, p, labels={"gpu-admission.io/tier": "training"})
    assert "gpu-count-exceeded" in rules(d)


def test_extra_container_shared_memory_bypasses_max_gpu_memory(policy):
    extra = container("extra", limits={"aliyun.com/gpu-mem": "80"})
    d, _ = admit(policy, pod(intent("dev", gpu_memory="4Gi"), [container(), extra]), labels=SANDBOX)
    assert "gpu-memory-exceeded" in rules(d) and not d.allowed


def test_extra_container_mig_devices_count(policy):
    extra = container("extra", limits={"nvidia.com/mig-1g.5gb": "1"})
    d, _ = admit(policy, pod(intent("batch", gpu_memory="4Gi"), [container(), extra]))
    assert "gpu-count-exceeded" in rules(d)


def test_extra_container_whole_gpu_breaks_isolation(policy):
    extra = container("extra", limits=GPU1)
    d, _ = admit(policy, pod(intent("dev", gpu_memory="4Gi"), [container(), extra]), labels=SANDBOX)
    assert not d.allowed and ({"gpu-kind-mixed", "pool-spoofing"} & set(rules(d)))


def test_container_intent_naming_an_init_container(policy):
    p = pod(intent("inference", gpu_memory="4Gi", container="init"), initContainers=[container("init")])
    d, _ = admit(policy, p)
    v = violation(d, "intent-invalid")
    assert "init" in v.message


@pytest.fixture(scope="module")
def deny_raw_policy():

    import yaml

    from webhook.policy import load_policy_texts

    text = (POLICIES / "default.yaml").read_text()
    doc = yaml.safe_load(text)
    doc["spec"]["settings"]["rawRequests"] = "deny"
    return load_policy_texts([("default.yaml", yaml.safe_dump(doc))])


def test_a_raw_request_naming_a_training_node_with_node_name_set_switched_off():
    """``node-name-set`` denies ``nodeName`` on GPU pods by default; a platform that turns it off still
    keeps raw requests in their entitlement. No toleration at all: ``nodeName`` skips the scheduler
    and the training pool's NoSchedule taints with it. Deny mode: ``pool-spoofing`` at
    ``spec.nodeName``. Pin mode: the pin's selector goes on, and the kubelet checks node affinity for
    a pod bound by name, so the pod can only start on an entitled pool."""

    import yaml

    from webhook.policy import load_policy_texts

    doc = yaml.safe_load((POLICIES / "default.yaml").read_text())
    doc["spec"]["rules"]["node-name-set"] = {"action": "off"}
    pin = load_policy_texts([("default.yaml", yaml.safe_dump(doc))])
    doc["spec"]["settings"]["rawRequests"] = "deny"
    deny = load_policy_texts([("default.yaml", yaml.safe_dump(doc))])
    obj = pod({}, [container(limits={"nvidia.com/gpu": "8"})], nodeName="h100-node-03")
    d, _ = admit(deny, obj)
    v = violation(d, "pool-spoofing")
    assert not d.allowed and "train-h100" in v.message and v.path == "spec.nodeName", v.render()
    d, stored = admit(pin, obj)
    assert d.allowed and train_selector(stored) == "gpu-infer", [x.render() for x in d.violations]
