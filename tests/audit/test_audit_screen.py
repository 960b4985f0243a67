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

from tests.audit.cluster import cluster_objects, pod
from tests.conftest import CORPUS, need_shared
from webhook import yamlpos
from webhook.audit.judge import CLUSTER_CONTEXT, NOT_GPU, judge
from webhook.audit.screen import Screen, markers
from webhook.check.runner import Status
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
