"""The server's node cache, driven by the real ``kubernetes`` client (``CoreV1Api.list_node``) against the
fake list/watch apiserver: nodes listed then followed, slimmed to what pools are judged by, the per-pool
view the engine gets (``mig-profile-unavailable`` against what the nodes advertise), and the gauge of
nodes that disagree with their pool's geometry."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import POLICIES
from tests.engine.helpers import intent, mutated, pod, rules
from tests.server.fake_apiserver import FakeNamespaceAPI
from tests.server.support import eventually, kube_api
from webhook.engine import Request, report
from webhook.policy import load_policy
from webhook.server import metrics
from webhook.server.node_watch import NodeObjects, slim
from webhook.server.reload import PolicyStore
from webhook.server.runtime import Runtime

BALANCED = {"nvidia.com/mig-1g.5gb": "16", "nvidia.com/mig-2g.10gb": "8", "nvidia.com/mig-3g.20gb": "8"}


def node(name: str, config: str, allocatable: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"workload": "gpu-infer", "nvidia.com/mig.config": config}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "64", **allocatable}, "images": [{"names": ["big"], "sizeBytes": 1}]},
    }


@pytest.fixture
def apiserver() -> Iterator[FakeNamespaceAPI]:
    api = FakeNamespaceAPI(path="/api/v1/nodes", list_kind="NodeList").start()
    api.put(node("a100-1", "all-balanced", BALANCED))
    yield api
    api.stop()


@pytest.fixture
def nodes(apiserver) -> Iterator[NodeObjects]:
    objects = NodeObjects.from_api(
        lambda: kube_api(apiserver.url), backoff_initial=0.02, backoff_max=0.1, watch_timeout=30
    )
    objects.start()
    yield objects
    objects.stop()


@pytest.fixture(scope="module")
def policy():
    return load_policy(POLICIES)


def test_nodes_are_listed_slimmed_and_followed(apiserver, nodes):
    assert nodes.cache.wait_synced(5)
    kept = nodes.cache.objects["a100-1"]
    assert kept["status"] == {"allocatable": {"cpu": "64", **BALANCED}}  # no image list
    assert kept["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    apiserver.put(node("a100-2", "all-1g.10gb", {"nvidia.com/mig-1g.10gb": "32"}))
    eventually(lambda: "a100-2" in nodes.cache.objects, what="ADDED node")
    assert apiserver.requests[0]["path"] == "/api/v1/nodes"


def test_the_engine_view_and_the_gauge_follow_the_nodes(apiserver, nodes, policy):
    assert nodes.cache.wait_synced(5)
    assert nodes.pool_mig(policy)["infer-a100"] == frozenset(BALANCED)
    assert nodes.publish(policy) == {"infer-a100": 0}
    assert metrics.POOL_GEOMETRY_MISMATCH.labels("infer-a100")._value.get() == 0

    # the node is re-partitioned by hand: every GPU into 1g.10gb, which the policy's all-balanced lacks
    apiserver.put(node("a100-1", "all-1g.10gb", {"nvidia.com/mig-1g.10gb": "32"}))
    eventually(lambda: "nvidia.com/mig-1g.10gb" in nodes.pool_mig(policy)["infer-a100"], what="MODIFIED node")
    assert nodes.publish(policy) == {"infer-a100": 1}
    assert metrics.POOL_GEOMETRY_MISMATCH.labels("infer-a100")._value.get() == 1

    cluster_view = Runtime(store=PolicyStore.load(POLICIES), nodes=nodes)._cluster_view()
    view = cluster_view()
    assert view.pool_mig == {"infer-a100": frozenset({"nvidia.com/mig-1g.10gb"})}
    # batch's 9Gi goes to the 1g.10gb the nodes have (9856Mi), not the policy's 2g.10gb
    d = report(policy, Request(pod(intent("batch")), namespace="team", cluster=view))
    assert d.allowed, d.message
    assert mutated(d)["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
    d = report(policy, Request(pod(intent("batch", gpu_memory="12Gi")), namespace="team", cluster=view))
    assert "gpu-memory-exceeded" in rules(d) and "they advertise nvidia.com/mig-1g.10gb" in d.message


def test_before_the_first_list_nothing_is_known(policy):
    never = FakeNamespaceAPI(path="/api/v1/nodes", list_kind="NodeList")  # not started: connection refused
    objects = NodeObjects.from_api(lambda: kube_api(never.url), backoff_initial=0.02)
    assert objects.pool_mig(policy) is None and objects.publish(policy) == {}
    d = report(policy, Request(pod(intent("batch")), namespace="team"))
    assert d.allowed


def test_slim_keeps_only_what_pools_are_judged_by():
    kept = slim(node("n", "all-balanced", BALANCED))
    assert set(kept) == {"metadata", "spec", "status"} and set(kept["status"]) == {"allocatable"}
