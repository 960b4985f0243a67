"""The audit's text screen never hides an object the engine would judge, read as a snapshot spells it
(YAML) and as ``audit`` on several workers writes the API's objects for it (orjson's JSON).

Every object of the test cluster and of the real-world corpus (skipped without ../shared) is judged
by the engine; each one the screen rejects must be one the engine finds not GPU-relevant. Each
marker is also shown to be needed: an object relevant through that marker alone is let through.
"""

from __future__ import annotations

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.audit.cluster import cluster_objects, pod, stored
from tests.conftest import CORPUS, need_shared
from webhook import yamlpos
from webhook.audit.judge import CLUSTER_CONTEXT, NOT_GPU, judge
from webhook.audit.screen import Screen, markers
from webhook.check.runner import Status
from webhook.engine.claim_object import is_claim_object
from webhook.engine.model.cluster import EMPTY_CLUSTER

ENCODINGS = {"yaml": yaml.safe_dump, "json": lambda obj: orjson.dumps(obj).decode("utf-8")}


@pytest.fixture(params=sorted(ENCODINGS))
def encoding(request: pytest.FixtureRequest) -> str:
    return request.param


def _check(policy, objects: list[tuple[str, dict]], encoding: str) -> int:
    _text = ENCODINGS[encoding]
    screen = Screen(markers(policy, EMPTY_CLUSTER))
    relevant = 0
    for where, obj in objects:
        if is_claim_object(obj):
            continue  # judged with the context, never screened (webhook.audit.run)
        verdict = judge(policy, obj, cluster=EMPTY_CLUSTER, namespace_labels=None)
        if verdict.status is not Status.SKIPPED:
            relevant += 1
            assert screen(_text(obj)), f"{where}: the screen hides a {verdict.status.value} object"
        elif not screen(_text(obj)):
            assert verdict.skip in (NOT_GPU, CLUSTER_CONTEXT)  # a workload without GPUs, or a Namespace/Node
    return relevant


def test_the_screen_keeps_every_relevant_object_of_the_test_cluster(policy, encoding: str) -> None:
    objs = [(o["metadata"]["name"], o) for o in cluster_objects(policy)]
    assert _check(policy, objs, encoding) >= 9


def test_the_screen_keeps_every_relevant_object_of_the_corpus(policy, encoding: str) -> None:
    found: list[tuple[str, dict]] = []
    for path in sorted(need_shared(CORPUS).rglob("*.yaml")):
        try:
            docs = list(yamlpos.iter_documents(path.read_text(encoding="utf-8"), with_nodes=False))
        except (OSError, UnicodeDecodeError):
            continue
        for doc in docs:
            if isinstance(doc, yamlpos.Document) and isinstance(doc.data, dict) and doc.data.get("kind"):
                found.append((f"{path.relative_to(CORPUS)}:{doc.line}", doc.data))
    assert _check(policy, found, encoding) > 10


def test_each_kind_of_relevance_passes_the_screen(policy, encoding: str) -> None:
    _text = ENCODINGS[encoding]
    screen = Screen(markers(policy, EMPTY_CLUSTER))
    privileged = pod("agent", "ns")
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    privileged["spec"]["tolerations"] = [{"operator": "Exists"}]  # onto the tainted GPU pools too
    toolkit = pod("toolkit", "ns")
    toolkit["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    toolkit["spec"]["tolerations"] = [{"operator": "Exists"}]
    claim = pod("claim", "ns")
    claim["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    claim["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    for obj in (pod("raw", "ns", gpus=1), pod("cls", "ns", cls="dev"), privileged, toolkit, claim):
        verdict = judge(policy, obj, cluster=EMPTY_CLUSTER, namespace_labels=None)
        assert verdict.status is not Status.SKIPPED, obj["metadata"]["name"]
        assert screen(_text(obj)), obj["metadata"]["name"]
    assert not screen(_text(pod("cpu", "ns")))


# --- every road to a GPU pool passes the screen (attacker tests, issue: blanket tolerations) ---------------


def _bare(name: str = "cpu") -> dict:
    obj = pod(name, "ns")
    obj["metadata"]["labels"] = {"app": "plain"}
    return obj


def test_a_blanket_toleration_alone_passes_the_screen(policy, encoding: str) -> None:
    """``{operator: Exists}`` names no key, so no word of it matches; the judge still denies the pod (its
    containers' device env on a GPU pool): the screen must let it through, kubectl's default tolerations
    beside it or not."""
    _text = ENCODINGS[encoding]
    screen = Screen(markers(policy, EMPTY_CLUSTER))
    for tolerations in (
        [{"operator": "Exists"}],
        [{"key": "", "operator": "Exists", "effect": "NoSchedule"}],
        [{"key": None, "operator": "Exists"}],
        [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
          "tolerationSeconds": 300}, {"effect": "NoSchedule", "operator": "Exists"}],
    ):
        obj = _bare()
        obj["spec"]["tolerations"] = tolerations
        verdict = judge(policy, obj, cluster=EMPTY_CLUSTER, namespace_labels=None)
        assert verdict.status is Status.DENIED, tolerations
        assert screen(_text(obj)), tolerations


def test_a_user_set_node_name_passes_the_screen(policy, encoding: str) -> None:
    """A pod bound by its own ``nodeName`` skips the scheduler and the ``NoSchedule`` taints of the GPU
    pools: judged (its device env), so not screened out; the scheduler's nodeName alone is not the user's."""
    _text = ENCODINGS[encoding]
    screen = Screen(markers(policy, EMPTY_CLUSTER))
    pinned = stored(_bare("pinned"), user_node=True)
    assert judge(policy, pinned, cluster=EMPTY_CLUSTER, namespace_labels=None).status is Status.DENIED
    assert screen(_text(pinned))
    bound = stored(_bare("bound"))
    assert judge(policy, bound, cluster=EMPTY_CLUSTER, namespace_labels=None).status is Status.SKIPPED
    assert not screen(_text(bound)), "a scheduled CPU pod with kubectl's default tolerations costs no parse"
    template = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns"},
        "spec": {"template": {"metadata": {}, "spec": {**_bare()["spec"], "nodeName": "gpu-node-1"}}},
    }
    assert judge(policy, template, cluster=EMPTY_CLUSTER, namespace_labels=None).status is not Status.SKIPPED
    assert screen(_text(template))


def test_a_pool_taint_key_passes_the_screen(policy, encoding: str) -> None:
    """Tolerating every taint of a pool by key (``workload=gpu-train`` beside ``nvidia.com/gpu``)."""
    _text = ENCODINGS[encoding]
    screen = Screen(markers(policy, EMPTY_CLUSTER))
    obj = _bare()
    obj["spec"]["tolerations"] = [{"key": k, "operator": "Exists"} for pool in policy.pools.values()
                                  for k, _, _ in pool.taints]
    assert judge(policy, obj, cluster=EMPTY_CLUSTER, namespace_labels=None).status is not Status.SKIPPED
    assert screen(_text(obj))


# --- the property: whatever the judge finds relevant, the screen lets through (generated objects) ---------

_KEYS = ("nvidia.com/gpu", "workload", "maint", "node.kubernetes.io/not-ready", "team", "", None)
_TOLERATION = st.fixed_dictionaries(
    {},
    optional={
        "key": st.sampled_from(_KEYS),
        "operator": st.sampled_from(("Exists", "Equal", "exists", "")),
        "value": st.sampled_from(("gpu-train", "x", "")),
        "effect": st.sampled_from(("NoSchedule", "NoExecute", "PreferNoSchedule", "")),
        "tolerationSeconds": st.just(300),
    },
)
_ENV = st.sampled_from(
    (
        [],
        [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
        [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
    )
)


@st.composite
def _objects(draw: st.DrawFn) -> dict:
    """A Pod (maybe as the apiserver stores it) or a Deployment, with the fields that open a road onto a
    GPU pool drawn at random and no marker word except what they need."""
    obj = _bare("gen")
    spec = obj["spec"]
    tolerations = draw(st.lists(_TOLERATION, max_size=3))
    if tolerations or draw(st.booleans()):
        spec["tolerations"] = tolerations
    spec["containers"][0]["env"] = draw(_ENV)
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(st.sampled_from(({"workload": "gpu-infer"}, {"workload": "gpu-train"}, {"a": "b"})))
    if draw(st.booleans()):
        spec["containers"][0]["securityContext"] = {"privileged": True}
    node = draw(st.sampled_from((None, "gpu-node-1", "cpu-node-1")))
    shape = draw(st.sampled_from(("pod", "stored", "deployment")))
    if shape == "deployment":
        if node:
            spec["nodeName"] = node
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "gen", "namespace": "ns"},
            "spec": {"template": {"metadata": {"labels": {"app": "gen"}}, "spec": spec}},
        }
    if shape == "stored":
        return stored(obj, node=node, user_node=draw(st.booleans()))
    if node:
        spec["nodeName"] = node
    return obj


def _api_json(obj: dict) -> str:
    """As :class:`~webhook.audit.inventory.ClusterInventory` writes a list item: apiVersion and kind last."""
    rest = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    return orjson.dumps({**rest, "apiVersion": obj["apiVersion"], "kind": obj["kind"]}).decode("utf-8")


_GPU_NODES = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-1", "labels": {"workload": "gpu-infer"}},
         "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                             {"key": "maint", "effect": "NoExecute"}]},
         "status": {"allocatable": {"nvidia.com/gpu": "8"}}},
    ],
}


def _gpu_node_cluster():
    from webhook.check.context import ClusterObjects

    found = ClusterObjects("default", complete=True)
    assert found.add(_GPU_NODES) is None
    return found.cluster()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=_objects(), nodes=st.booleans())
def test_the_screen_never_hides_what_the_judge_reports(policy, obj: dict, nodes: bool) -> None:
    cluster = _gpu_node_cluster() if nodes else EMPTY_CLUSTER
    screen = Screen(markers(policy, cluster))
    verdict = judge(policy, obj, cluster=cluster, namespace_labels=None)
    if verdict.status is Status.SKIPPED:
        return
    for write in (*ENCODINGS.values(), _api_json):
        assert screen(write(obj)), f"{verdict.status.value} {verdict.violations} hidden from the screen"


def test_a_gpu_node_that_keeps_nobody_out_passes_every_item(policy) -> None:
    """A Node of a pool that carries none of the pool's taints: any pod may land there (the scheduler's
    view; the engine's own cheap gate, ``may_reach_a_pool``, reads the pools' taints only)."""
    from webhook.check.context import ClusterObjects

    found = ClusterObjects("default", complete=True)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "open", "labels": {"workload": "gpu-dev"}}}
    assert found.add(node) is None
    screen = Screen(markers(policy, found.cluster()))
    bare = _bare()
    assert screen(orjson.dumps(bare).decode()) and not Screen(markers(policy, EMPTY_CLUSTER))(yaml.safe_dump(bare))


def test_a_toleration_list_the_screen_cannot_read_is_let_through() -> None:
    """Flow style, an alias, a list cut short: read the item rather than guess."""
    from webhook.audit.screen import blanket_toleration

    assert blanket_toleration("spec:\n  tolerations: [{operator: Exists}]\n")
    assert blanket_toleration("spec:\n  tolerations: *all\n")
    assert blanket_toleration('{"spec":{"tolerations":[{"operator":"Exists"')
    assert blanket_toleration("spec:\n  tolerations:\n  - operator: Exists\n    # note\n  containers: []\n")
    assert not blanket_toleration("spec:\n  tolerations:\n  - key: a\n    operator: Exists\n  containers: []\n")
    assert not blanket_toleration('{"spec":{"tolerations":[{"key":"a]","operator":"Exists"}],"x":[{"operator":1}]}}')
