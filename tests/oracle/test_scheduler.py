"""The oracle itself, against Kubernetes' documented behaviour (the examples of the API reference and of
the upstream unit tests cited in ``tests/oracle/scheduler.py``): so that the property tests judge the
webhook by what the scheduler does, not by what we think it does."""

from __future__ import annotations

import pytest

from tests.conftest import DEFAULT_POLICY_DIR
from tests.oracle.cluster import read_policy
from tests.oracle.controllers import daemon_pod, pods_of, should_run_daemon_pod
from tests.oracle.scheduler import (
    Node,
    can_bind,
    fits,
    pod_requests,
    rejected_by_apiserver,
    required_node_affinity_matches,
    requirement_matches,
    tolerates,
    untolerated_taints,
)

NODE = Node("gpu-7", {"workload": "gpu-train", "kubernetes.io/hostname": "gpu-7", "rank": "5"})


def affinity(*terms):
    return {
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
        }
    }


def expr(key, op, *values):
    e = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return e


# --- operators (labels.Requirement.Matches) ------------------------------------------------------------

LABELS = {"workload": "gpu-train", "rank": "5", "name": "x7"}


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        (expr("workload", "In", "gpu-train", "gpu-infer"), True),
        (expr("workload", "In", "gpu-infer"), False),
        (expr("absent", "In", "x"), False),
        (expr("workload", "NotIn", "gpu-infer"), True),
        (expr("workload", "NotIn", "gpu-train"), False),
        (expr("absent", "NotIn", "x"), True),  # NotIn matches a node without the label
        (expr("workload", "Exists"), True),
        (expr("absent", "Exists"), False),
        (expr("workload", "DoesNotExist"), False),
        (expr("absent", "DoesNotExist"), True),
        (expr("rank", "Gt", "4"), True),
        (expr("rank", "Gt", "5"), False),
        (expr("rank", "Lt", "6"), True),
        (expr("rank", "Lt", "5"), False),
        (expr("name", "Gt", "1"), False),  # a label that is not an integer never compares
        (expr("absent", "Lt", "9"), False),  # Gt/Lt need the label
    ],
)
def test_each_operator(requirement, expected):
    assert requirement_matches(requirement, LABELS) is expected


# --- nodeSelector and required node affinity --------------------------------------------------------------


def test_node_selector_must_match_every_label():
    assert required_node_affinity_matches({"nodeSelector": {"workload": "gpu-train"}}, NODE)
    assert not required_node_affinity_matches({"nodeSelector": {"workload": "gpu-train", "zone": "a"}}, NODE)


def test_terms_are_ored_expressions_anded():
    ok = {"matchExpressions": [expr("workload", "In", "gpu-train"), expr("rank", "Gt", "1")]}
    half = {"matchExpressions": [expr("workload", "In", "gpu-train"), expr("rank", "Gt", "9")]}
    assert required_node_affinity_matches(affinity(half, ok), NODE)
    assert not required_node_affinity_matches(affinity(half), NODE)


def test_empty_term_matches_nothing():
    assert not required_node_affinity_matches(affinity({}), NODE)
    assert required_node_affinity_matches(affinity({}, {"matchExpressions": [expr("rank", "Exists")]}), NODE)


def test_node_selector_and_affinity_are_anded():
    spec = {"nodeSelector": {"workload": "gpu-infer"}, **affinity({"matchExpressions": [expr("rank", "Exists")]})}
    assert not required_node_affinity_matches(spec, NODE)


def test_match_fields_on_the_node_name_only():
    assert required_node_affinity_matches(affinity({"matchFields": [expr("metadata.name", "In", "gpu-7")]}), NODE)
    assert not required_node_affinity_matches(affinity({"matchFields": [expr("metadata.name", "In", "gpu-8")]}), NODE)
    assert required_node_affinity_matches(affinity({"matchFields": [expr("metadata.name", "NotIn", "gpu-8")]}), NODE)
    # expressions and fields of one term are ANDed
    both = {"matchExpressions": [expr("workload", "In", "x")], "matchFields": [expr("metadata.name", "In", "gpu-7")]}
    assert not required_node_affinity_matches(affinity(both), NODE)
    assert rejected_by_apiserver({"spec": affinity({"matchFields": [expr("metadata.labels", "In", "x")]})})
    assert rejected_by_apiserver({"spec": affinity({"matchFields": [expr("metadata.name", "In", "a", "b")]})})


def test_preferred_terms_never_filter():
    spec = {
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "preference": {"matchExpressions": [expr("workload", "In", "nope")]}}
                ]
            }
        }
    }
    assert required_node_affinity_matches(spec, NODE)


def test_invalid_requirements_are_rejected_before_scheduling():
    for bad in (
        expr("a", "In"),
        expr("a", "Exists", "x"),
        expr("a", "Gt", "x"),
        expr("a", "Gt", "1", "2"),
        expr("a", "Near", "x"),
    ):
        assert rejected_by_apiserver({"spec": affinity({"matchExpressions": [bad]})}), bad
    assert rejected_by_apiserver(
        {
            "spec": {
                "affinity": {
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
                }
            }
        }
    )


# --- TaintToleration --------------------------------------------------------------------------------------

TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"operator": "Exists"}, True),  # empty key + Exists: every taint
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, True),  # no effect: every effect
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}, True),
        ({"key": "nvidia.com/gpu", "value": "present"}, True),  # empty operator is Equal
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "other"}, False),
        ({"key": "nvidia.com/gpu", "operator": "Equal"}, False),  # no value is "", not "any"
        ({"key": "other", "operator": "Exists"}, False),
        ({"operator": "Exists", "effect": "NoSchedule"}, True),
        ({"operator": "Exists", "effect": "PreferNoSchedule"}, False),
    ],
)
def test_tolerates_taint(toleration, expected):
    assert tolerates(toleration, TAINT) is expected


def test_equal_without_value_tolerates_a_taint_without_value():
    assert tolerates({"key": "k", "operator": "Equal"}, {"key": "k", "effect": "NoSchedule"})


def test_numeric_toleration_operators():
    taint = {"key": "rank", "value": "5", "effect": "NoSchedule"}
    assert tolerates({"key": "rank", "operator": "Gt", "value": "3"}, taint)
    assert not tolerates({"key": "rank", "operator": "Gt", "value": "5"}, taint)
    assert tolerates({"key": "rank", "operator": "Lt", "value": "9"}, taint)
    assert not tolerates({"key": "rank", "operator": "Lt", "value": "9"}, {**taint, "value": "x"})


def test_only_no_schedule_and_no_execute_filter():
    node = Node("n", {}, taints=({"key": "soft", "value": "", "effect": "PreferNoSchedule"},))
    assert not untolerated_taints({}, node)
    hard = Node("n", {}, taints=({"key": "hard", "value": "", "effect": "NoExecute"},))
    assert untolerated_taints({}, hard)
    assert not untolerated_taints({"tolerations": [{"key": "hard", "operator": "Exists"}]}, hard)


def test_every_filtering_taint_needs_a_toleration():
    node = Node("n", {}, taints=(TAINT, {"key": "workload", "value": "gpu-train", "effect": "NoSchedule"}))
    one = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}
    assert untolerated_taints(one, node) == [{"key": "workload", "value": "gpu-train", "effect": "NoSchedule"}]


def test_invalid_tolerations_are_rejected():
    assert rejected_by_apiserver({"spec": {"tolerations": [{"operator": "Equal", "value": "x"}]}})
    assert rejected_by_apiserver({"spec": {"tolerations": [{"key": "k", "operator": "Exists", "value": "x"}]}})
    assert not rejected_by_apiserver({"spec": {"tolerations": [{"operator": "Exists"}]}})


# --- NodeResourcesFit -------------------------------------------------------------------------------------


def c(name, limits=None, requests=None, **extra):
    out = {"name": name, **extra}
    if limits is not None or requests is not None:
        out["resources"] = {k: v for k, v in (("limits", limits), ("requests", requests)) if v is not None}
    return out


def test_requests_default_to_limits_and_add_up():
    spec = {"containers": [c("a", {"nvidia.com/gpu": "2"}), c("b", {"nvidia.com/gpu": "3"})]}
    assert pod_requests(spec) == {"nvidia.com/gpu": 5}


def test_sidecars_add_up_and_init_containers_take_the_max():
    # KEP-753: max(Σ regular + Σ sidecars, for each init: itself + the sidecars started before it)
    spec = {
        "containers": [c("main", {"nvidia.com/gpu": "1"})],
        "initContainers": [
            c("side", {"nvidia.com/gpu": "2"}, restartPolicy="Always"),
            c("init", {"nvidia.com/gpu": "2"}),
        ],
    }
    assert pod_requests(spec) == {"nvidia.com/gpu": 4}  # init 2 + side 2 = 4 > 1 + 2
    spec["initContainers"][1] = c("init", {"nvidia.com/gpu": "1"})
    assert pod_requests(spec) == {"nvidia.com/gpu": 3}  # 1 + 2 > 1 + 2 = 3


def test_a_resource_the_node_does_not_list_is_zero():
    node = Node("n", {}, allocatable={"nvidia.com/gpu": 8})
    assert fits({"containers": [c("a", {"nvidia.com/gpu": "8"})]}, node)
    assert not fits({"containers": [c("a", {"nvidia.com/gpu": "9"})]}, node)
    assert not fits({"containers": [c("a", {"nvidia.com/mig-1g.5gb": "1"})]}, node)
    assert fits({"containers": [c("a", {"nvidia.com/mig-1g.5gb": "0"})]}, node)  # a zero request is skipped


def test_node_name_bypasses_no_schedule_taints_not_affinity_resources_or_no_execute():
    node = Node("n1", {"a": "b"}, taints=(TAINT,), allocatable={"nvidia.com/gpu": 1})
    pod = {"spec": {"nodeName": "n1", "containers": [c("a", {"nvidia.com/gpu": "1"})]}}
    assert TAINT["effect"] == "NoSchedule" and can_bind(pod, node)
    assert not can_bind({"spec": {**pod["spec"], "nodeSelector": {"a": "x"}}}, node)
    assert not can_bind({"spec": {"nodeName": "n2", "containers": []}}, node)
    evicting = Node("n1", {}, taints=({"key": "k", "value": "v", "effect": "NoExecute"},))
    assert not can_bind({"spec": {"nodeName": "n1", "containers": []}}, evicting)
    tolerant = {"nodeName": "n1", "containers": [], "tolerations": [{"key": "k", "operator": "Exists"}]}
    assert can_bind({"spec": tolerant}, evicting)


# --- cluster and controllers ------------------------------------------------------------------------------


def test_default_policy_nodes_as_the_pools_describe_them():
    facts = read_policy(DEFAULT_POLICY_DIR / "default.yaml")
    pools = {p.name: p for p in facts.pools}
    assert pools["infer-a100"].allocatable["nvidia.com/mig-1g.5gb"] == 7 * 8
    assert pools["infer-a100"].allocatable["nvidia.com/gpu"] == 8
    assert "nvidia.com/gpu" not in pools["dev-cgpu"].allocatable
    assert pools["dev-cgpu"].allocatable["aliyun.com/gpu-mem"] == 24 * 4
    assert {t["key"] for t in pools["train-h100"].taints} == {"nvidia.com/gpu", "workload"}
    assert pools["infer-a100"].sliced and pools["dev-cgpu"].sliced and not pools["train-h100"].sliced
    assert facts.entitled_pools({"gpu-admission.io/tier": "serving"}, None) == {"infer-a100"}
    assert facts.entitled_pools({}, "training") == {"train-h100"}
    assert facts.entitled_pools({"gpu-admission.io/tier": "sandbox"}, "training") == set()


def test_daemonset_pods_are_pinned_to_their_node():
    tainted = Node("g1", {"workload": "gpu-train"}, taints=(TAINT,))
    plain = Node("c1", {})
    tpl = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [c("a")]}}
    assert not should_run_daemon_pod(tpl, tainted) and should_run_daemon_pod(tpl, plain)
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d"}, "spec": {"template": tpl}}
    (pod,) = pods_of(ds, [tainted, plain])
    assert can_bind(pod, plain) and not can_bind(pod, Node("c2", {}))
    assert daemon_pod(tpl, plain, "x")["spec"]["tolerations"][0]["key"] == "node.kubernetes.io/not-ready"
