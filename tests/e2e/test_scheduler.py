"""The real kube-scheduler binds what we admit, and agrees with the scheduler oracle the property tests use.

1. Every class pod the shipped policy admits (each class, each isolation it allows, memory sizes that
   pick each MIG profile and shared slice) is bound by the real scheduler to a node of its class's pool:
   no pod stays Pending because the webhook wrote a resource name, a count or a selector no node offers.
2. ``tests/oracle/scheduler.py`` (the emulation the oracle property runs over thousands of generated
   pods) is checked against the real scheduler on a shared sample: pods drawn by the oracle's own
   strategies, sent to a namespace our webhooks do not intercept, are bound by kube-scheduler exactly
   when the oracle says some node can take them, and only to a node the oracle allows.

Nothing runs (no kubelet): a bound pod keeps ``spec.nodeName`` and is force-deleted after the test so
its devices are free again.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e import install, objects
from tests.e2e.conftest import POLICY_FILE, Product
from tests.e2e.plane.controlplane import Plane
from tests.oracle import scheduler as oracle
from tests.oracle.cluster import read_policy


def _classes() -> dict[str, Any]:
    return yaml.safe_load(POLICY_FILE.read_text())["spec"]["classes"]


def class_pods() -> list[tuple[str, dict[str, Any]]]:
    """(id, pod) for each class and isolation of the shipped policy, at sizes that pick different devices."""
    sizes = {"mig": ["4Gi", "9Gi", "19Gi"], "shared": ["4Gi", "22Gi"], "exclusive": [None]}
    out = []
    for name, cls in _classes().items():
        iso = cls.get("isolation") or {}
        allowed = iso.get("allowed") or [iso.get("default", "exclusive")]
        for isolation in allowed:
            for memory in sizes[isolation]:
                gpus = [1, cls.get("maxGPUs", 1)] if isolation == "exclusive" else [1]
                for n in sorted(set(gpus)):
                    ann = {"gpu-admission.io/isolation": isolation}
                    if memory:
                        ann["gpu-admission.io/gpu-memory"] = memory
                    if isolation == "exclusive":
                        ann["gpu-admission.io/gpus"] = str(n)
                    pod = {
                        "apiVersion": "v1", "kind": "Pod",
                        "metadata": {"generateName": f"{name}-", "labels": {"gpu-admission.io/workload": name},
                                     "annotations": ann},
                        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1",
                                                 "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]},
                    }  # fmt: skip
                    out.append((f"{name}-{isolation}-{memory or str(n) + 'gpu'}", pod))
    return out


def scheduled(plane: Plane, name: str, ns: str) -> dict[str, Any] | None:
    """The pod once the scheduler decided: bound (nodeName) or reported Unschedulable; None before."""
    pod = install.get(plane, "pod", name, ns)
    if pod["spec"].get("nodeName"):
        return pod
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond["type"] == "PodScheduled" and cond["status"] == "False" and cond.get("reason") == "Unschedulable":
            return pod
    return None


def force_delete(plane: Plane, name: str, ns: str) -> None:
    plane.kubectl("delete", "pod", name, "-n", ns, "--grace-period=0", "--force", "--ignore-not-found")


CLASS_PODS = class_pods()


@pytest.fixture(scope="module")
def class_ns(product: Product) -> str:
    return install.namespace(product.plane, prefix="bind")


@pytest.mark.parametrize("pod", [p for _, p in CLASS_PODS], ids=[i for i, _ in CLASS_PODS])
def test_every_admitted_class_pod_binds_to_its_pool(product: Product, class_ns: str, pod: dict[str, Any]) -> None:
    plane = product.plane
    result = objects.check(pod, class_ns)
    code, stored, err = objects.create(plane, pod, class_ns)
    assert (code == 0) == result["allowed"], err
    assert code == 0, f"a class pod of the shipped policy was refused: {err}"
    assert stored is not None
    name = stored["metadata"]["name"]
    try:
        decided = install.wait_for(lambda: scheduled(plane, name, class_ns), f"pod {name} to be scheduled")
        node = decided["spec"].get("nodeName")
        assert node, f"pod stayed Pending: {json.dumps(decided.get('status'))}"
        pools = _classes()[pod["metadata"]["labels"]["gpu-admission.io/workload"]]["pools"]
        assert product.nodes[node] in pools, f"bound to {node} of pool {product.nodes[node]}, class pools {pools}"
    finally:
        force_delete(plane, name, class_ns)


# --- the oracle against the real scheduler -------------------------------------------------------------------


def oracle_nodes(plane: Plane, names: list[str]) -> tuple[oracle.Node, ...]:
    out = []
    for name in names:
        node = install.get(plane, "node", name)
        allocatable = {k: int(v) for k, v in node["status"]["allocatable"].items() if "/" in k}
        out.append(oracle.Node(name=name, labels=node["metadata"].get("labels") or {},
                               taints=tuple(node["spec"].get("taints") or ()), allocatable=allocatable))  # fmt: skip
    return tuple(out)


@pytest.fixture(scope="module")
def agreement(product: Product) -> tuple[Plane, tuple[oracle.Node, ...]]:
    return product.plane, oracle_nodes(product.plane, sorted(product.nodes))


def _pod_specs(cluster: tuple[oracle.Node, ...]):
    from tests.oracle.workloads import pod_spec

    facts = read_policy(POLICY_FILE)
    return pod_spec(facts, cluster, None, "wild")


@pytest.mark.slow
def test_the_scheduler_oracle_agrees_with_kube_scheduler(agreement) -> None:
    plane, cluster = agreement
    ns = objects.UNINTERCEPTED  # no webhook of ours: the pod is bound (or not) as written

    @settings(max_examples=25, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(spec=_pod_specs(cluster), n=st.integers(0, 10**6))
    def agree(spec: dict[str, Any], n: int) -> None:
        spec.pop("ephemeralContainers", None)  # not accepted at CREATE
        spec.pop("nodeName", None)  # the scheduler is bypassed: nothing of its to compare
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"oracle-{n}"}, "spec": spec}
        if oracle.rejected_by_apiserver(pod):
            return
        code, stored, _ = objects.create(plane, pod, ns)
        if code != 0:
            return  # the apiserver refused something the oracle's validation does not model: nothing to bind
        assert stored is not None
        try:
            decided = install.wait_for(lambda: scheduled(plane, pod["metadata"]["name"], ns), "a scheduling decision")
            can = {n.name for n in oracle.reach(stored, cluster)}
            bound = decided["spec"].get("nodeName")
            if bound:
                assert bound in can, f"kube-scheduler bound to {bound}; the oracle allows {sorted(can)}"
            else:
                assert not can, f"kube-scheduler found no node; the oracle allows {sorted(can)}"
        finally:
            force_delete(plane, pod["metadata"]["name"], ns)

    agree()
