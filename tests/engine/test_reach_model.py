"""The reachability model (webhook.engine.model.reach), case by case against the Kubernetes rules it follows:
taint/toleration matching (k8s.io/api core/v1 Toleration.ToleratesTaint), node affinity operators and
matchFields (NodeAffinity filter), extended resources (NodeResourcesFit), and exact per-node judgement."""

from __future__ import annotations

import pytest

from tests.engine.helpers import container, pod
from webhook.engine.model import reach
from webhook.engine.model.devices import inspect_pod


def reached(policy, spec_extra, limits=None, nodes=()):
    spec = pod({}, [container(limits=limits)] if limits else None, **spec_extra)["spec"]
    res = inspect_pod(spec, gpu_prefixes=policy.gpu_prefixes, rdma=policy.rdma_resources)
    return reach.reachable(policy, reach.placement(spec, res), tuple(nodes))


GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
TRAIN_TAINT = {"key": "workload", "operator": "Equal", "value": "gpu-train", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        ([], set()),
        ([{"operator": "Exists"}], {"infer-a100", "dev-cgpu", "train-h100"}),
        ([{"operator": "Exists", "effect": "NoExecute"}], set()),  # an empty key with an effect: that effect only
        ([GPU_TAINT], {"infer-a100", "dev-cgpu"}),
        ([{"key": "nvidia.com/gpu", "operator": "Exists"}], {"infer-a100", "dev-cgpu"}),  # no effect: every effect
        ([GPU_TAINT, TRAIN_TAINT], {"infer-a100", "dev-cgpu", "train-h100"}),
        ([GPU_TAINT, {**TRAIN_TAINT, "value": "gpu-infer"}], {"infer-a100", "dev-cgpu"}),  # Equal compares values
        ([GPU_TAINT, {"key": "workload", "operator": "Exists"}], {"infer-a100", "dev-cgpu", "train-h100"}),
        ([GPU_TAINT, {**TRAIN_TAINT, "effect": "PreferNoSchedule"}], {"infer-a100", "dev-cgpu"}),
    ],
)
def test_tolerations(policy, tolerations, expected):
    assert reached(policy, {"tolerations": tolerations}) == expected


def aff(*exprs, fields=()):
    term = {}
    if exprs:
        term["matchExpressions"] = list(exprs)
    if fields:
        term["matchFields"] = list(fields)
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


ALL = {"infer-a100", "dev-cgpu", "train-h100"}


@pytest.mark.parametrize(
    ("affinity", "expected"),
    [
        (aff({"key": "workload", "operator": "In", "values": ["gpu-dev"]}), {"dev-cgpu"}),
        (aff({"key": "workload", "operator": "NotIn", "values": ["gpu-dev"]}), {"infer-a100", "train-h100"}),
        (aff({"key": "workload", "operator": "Exists"}), ALL),
        (aff({"key": "workload", "operator": "DoesNotExist"}), set()),
        (aff({"key": "zone", "operator": "DoesNotExist"}), ALL),  # a label no pool fixes
        (aff({"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}), ALL),
        (aff({"key": "workload", "operator": "Gt", "values": ["3"]}), set()),  # fixed, not an integer
        (aff(fields=[{"key": "metadata.name", "operator": "In", "values": ["n1"]}]), ALL),
        (
            {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 1,
                            "preference": {
                                "matchExpressions": [{"key": "workload", "operator": "In", "values": ["gpu-dev"]}]
                            },
                        }
                    ]
                }
            },
            ALL,
        ),
    ],
)
def test_node_affinity(policy, affinity, expected):
    assert reached(policy, {"tolerations": [{"operator": "Exists"}], "affinity": affinity}) == expected


def test_node_selector_and_devices(policy):
    blanket = {"tolerations": [{"operator": "Exists"}]}
    assert reached(policy, {**blanket, "nodeSelector": {"workload": "gpu-train"}}) == {"train-h100"}
    assert reached(policy, {**blanket, "nodeSelector": {"kubernetes.io/hostname": "x"}}) == ALL
    assert reached(policy, blanket, {"aliyun.com/gpu-mem": "4"}) == {"dev-cgpu"}
    assert reached(policy, blanket, {"nvidia.com/gpu": "1"}) == {"infer-a100", "train-h100"}
    assert reached(policy, blanket, {"nvidia.com/mig-1g.5gb": "1"}) == {"infer-a100"}
    assert reached(policy, blanket, {"nvidia.com/gpu": "0"}) == ALL  # zero requests fit everywhere


def node(name, labels, taints=(), allocatable=None):
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": {"taints": list(taints)},
        "status": {"allocatable": allocatable or {}},
    }


NODES = (
    node(
        "i1",
        {"workload": "gpu-infer"},
        [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        {"nvidia.com/gpu": "8"},
    ),
    node(
        "t1",
        {"workload": "gpu-train"},
        [
            {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
            {"key": "workload", "value": "gpu-train", "effect": "NoSchedule"},
        ],
        {"nvidia.com/gpu": "8"},
    ),
)


def test_exact_per_node_with_node_objects(policy):
    blanket = {"tolerations": [{"operator": "Exists"}]}
    # a hostname / node name of a known node pins the pool: the pod can bind nowhere else (dev-cgpu,
    # with no known node, cannot hold a node the pod names)
    assert reached(policy, {**blanket, "nodeSelector": {"kubernetes.io/hostname": "i1"}}, nodes=NODES) == {"infer-a100"}
    fields = aff(fields=[{"key": "metadata.name", "operator": "In", "values": ["t1"]}])
    assert reached(policy, {**blanket, "affinity": fields}, {"nvidia.com/gpu": "1"}, nodes=NODES) == {"train-h100"}
    # the node's real taint value decides an Equal toleration
    equal = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}]}
    assert reached(policy, equal, {"nvidia.com/gpu": "1"}, nodes=NODES) == {"infer-a100"}


def test_a_named_node_no_one_knows_keeps_the_model(policy):
    """Found by the oracle: a pod whose required affinity names a node the watch has not delivered (a
    DaemonSet pod for a node that just joined, or a name picked by hand) was judged by today's nodes
    alone, so it reached nothing; the node with that name then joined a pool the namespace may not use."""
    blanket = {"tolerations": [{"operator": "Exists"}]}
    gpu = {"nvidia.com/gpu": "1"}
    unknown = aff(fields=[{"key": "metadata.name", "operator": "In", "values": ["i2"]}])
    assert reached(policy, {**blanket, "affinity": unknown}, gpu, nodes=NODES) == {"infer-a100", "train-h100"}
    known = aff(fields=[{"key": "metadata.name", "operator": "In", "values": ["i1"]}])
    assert reached(policy, {**blanket, "affinity": known}, gpu, nodes=NODES) == {"infer-a100"}
    # one unknown hostname among known ones is enough
    hosts = aff({"key": "kubernetes.io/hostname", "operator": "In", "values": ["i1", "i9"]})
    assert reached(policy, {**blanket, "affinity": hosts}, nodes=NODES) == ALL
    assert reached(policy, {**blanket, "nodeSelector": {"kubernetes.io/hostname": "i9"}}, nodes=NODES) == ALL
    assert reached(policy, {**blanket, "nodeSelector": {"kubernetes.io/hostname": "t1"}}, nodes=NODES) == {"train-h100"}


EVICTING = {"key": "gpu-admission.io/evict", "value": "x", "effect": "NoExecute"}


def test_node_name_skips_the_scheduler_and_its_no_schedule_taints(policy):
    """``spec.nodeName``: the kubelet's admission checks node affinity, resources and NoExecute taints
    (``pkg/kubelet/lifecycle/predicate.go``), not the NoSchedule taints every pool of the default
    policy relies on: with no toleration at all, the pod reaches every pool its labels allow."""
    assert reached(policy, {}) == set()
    assert reached(policy, {"nodeName": "gpu-7"}) == ALL
    assert reached(policy, {"nodeName": "gpu-7", "nodeSelector": {"workload": "gpu-dev"}}) == {"dev-cgpu"}
    assert reached(policy, {"nodeName": "gpu-7"}, {"nvidia.com/mig-1g.5gb": "1"}) == {"infer-a100"}
    # known nodes: exactly the named one
    assert reached(policy, {"nodeName": "i1"}, nodes=NODES) == {"infer-a100"}
    assert reached(policy, {"nodeName": "gone"}, nodes=NODES) == ALL  # a name no node has yet: any pool
    cpu = node("c1", {})
    assert reached(policy, {"nodeName": "c1"}, nodes=(*NODES, cpu)) == set()
    # a NoExecute taint still keeps it out, unless tolerated
    evicting = node("e1", {"workload": "gpu-train"}, [EVICTING], {"nvidia.com/gpu": "8"})
    assert "train-h100" not in reached(policy, {"nodeName": "e1"}, nodes=(*NODES, evicting))
    tolerant = {"nodeName": "e1", "tolerations": [{"key": EVICTING["key"], "operator": "Exists"}]}
    assert "train-h100" in reached(policy, tolerant, nodes=(*NODES, evicting))


def test_node_names_do_not_crowd_the_policy_memo(policy):
    """Every bound pod carries its own ``nodeName``; the pool model needs only to know one is set, so
    a stream of bound pods' UPDATEs adds one memo entry, not one per node (the memo is emptied when
    full, which would cost every other remembered answer)."""
    before = {k for k in policy.memo if k[0] == "reach"}
    results = {frozenset(reached(policy, {"nodeName": f"gpu-{i}"})) for i in range(50)}
    added = {k for k in policy.memo if k[0] == "reach"} - before
    assert results == {frozenset(ALL)} and len(added) <= 1  # 0 when an earlier test asked the same
