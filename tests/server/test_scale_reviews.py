"""Scaling after create: a ``<resource>/scale`` review is judged as the object it scales.

The attack: create a training StatefulSet at one replica (no gang needed for one pod), then
``kubectl scale sts train --replicas 8``. The apiserver sends the validating webhook an
``autoscaling/v1`` Scale (name and count only) for ``statefulsets/scale``; nothing in it names the
class, so before this the webhook never saw it (no rule named the subresource) and, had it seen it,
could not have judged it. Now the server reads the StatefulSet from the apiserver (the real
``kubernetes`` client against ``fake_apiserver``, which answers a GET of one object's REST path as the
apiserver does) and the engine judges the StatefulSet at eight replicas: ``gang-required``.

The apiserver cannot run here; what it sends for a scale is emulated from its documented behaviour:
``request.kind`` ``autoscaling/v1 Scale``, ``request.resource`` the parent's resource,
``request.subResource: scale``, ``request.name`` the parent's name, ``object``/``oldObject`` the new and
the old Scale (``spec.replicas``, ``status.replicas``, ``status.selector``).
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import POLICIES
from tests.server.fake_apiserver import FakeNamespaceAPI
from tests.server.support import check_response, cluster_server, eventually
from webhook.server.admission import Admitter
from webhook.server.namespaces import OfflineNamespaces
from webhook.server.reload import PolicyStore
from webhook.server.scale import ApiParents, object_path

TRAIN = {"gpu-admission.io/workload": "training"}


def statefulset(replicas: int = 1, labels: dict | None = None, name: str = "train") -> dict[str, Any]:
    tpl_labels = {"app": name, **(labels if labels is not None else TRAIN)}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "research", "uid": f"uid-{name}", "resourceVersion": "7"},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": tpl_labels},
                "spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]},
            },
        },
    }


def scale(replicas: int, name: str = "train") -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": name, "namespace": "research", "uid": f"uid-{name}", "resourceVersion": "7"},
        "spec": {"replicas": replicas},
        "status": {"replicas": 1, "selector": f"app={name}"},
    }


def scale_review(new: int, old: int, *, name: str = "train", resource: str = "statefulsets") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "resource": {"group": "apps", "version": "v1", "resource": resource},
            "subResource": "scale",
            "requestKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "requestResource": {"group": "apps", "version": "v1", "resource": resource},
            "requestSubResource": "scale",
            "name": name,
            "namespace": "research",
            "operation": "UPDATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": scale(new, name),
            "oldObject": scale(old, name),
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"},
        },
    }


@pytest.fixture
def fake() -> Iterator[FakeNamespaceAPI]:
    api = FakeNamespaceAPI({"research": {}}).start()
    for obj in (statefulset(), statefulset(labels={}, name="web")):
        meta = obj["metadata"]
        api.objects[object_path("apps", "v1", "statefulsets", meta["namespace"], meta["name"])] = obj
    yield api
    api.stop()


def api_client(url: str) -> Any:
    """A real kubernetes-client ApiClient talking plain HTTP to the fake apiserver."""
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = url
    return client.ApiClient(configuration)


def admitter(parents: Any) -> Admitter:
    return Admitter(PolicyStore.load(POLICIES), OfflineNamespaces(), parents=parents)


def answer(admit: Admitter, sent: dict[str, Any]) -> dict[str, Any]:
    doc = admit.handle("validate", orjson.dumps(sent))
    return doc["response"]


def test_kubectl_scale_of_a_training_statefulset_past_one_pod_is_gang_required(fake):
    admit = admitter(ApiParents(lambda: api_client(fake.url)))
    got = answer(admit, scale_review(8, 1))
    assert got["allowed"] is False and got["status"]["code"] == 403
    assert got["status"]["message"].startswith("[gang-required] 8 pods of class 'training'"), got["status"]
    assert "/apis/apps/v1/namespaces/research/statefulsets/train" in [r["path"] for r in fake.requests]


def test_a_scale_the_gang_rules_do_not_object_to_is_admitted(fake):
    admit = admitter(ApiParents(lambda: api_client(fake.url)))
    assert answer(admit, scale_review(1, 1))["allowed"] is True  # one pod: no gang needed
    assert answer(admit, scale_review(8, 1, name="web"))["allowed"] is True  # a CPU StatefulSet


def test_a_parent_that_cannot_be_read_is_never_admitted(fake):
    admit = admitter(ApiParents(lambda: api_client(fake.url)))
    got = answer(admit, scale_review(8, 1, name="ghost"))
    assert got["allowed"] is False
    message = got["status"]["message"]
    assert message.startswith("[engine-error] gpu-admission could not read statefulsets.apps research/ghost"), message
    assert "not found (404)" in message and message.endswith("retry")
    offline = answer(admitter(None), scale_review(8, 1))
    assert offline["allowed"] is False and "no access to the cluster" in offline["status"]["message"]


def test_a_scale_of_a_kind_without_a_declared_scale_is_not_read(fake):
    """daemonsets have no scale subresource: such a review is not the webhook's (no rule sends it), and
    if one arrives anyway nothing is read for it."""
    admit = admitter(ApiParents(lambda: api_client(fake.url)))
    before = len(fake.requests)
    assert answer(admit, scale_review(8, 1, resource="daemonsets"))["allowed"] is True
    assert len(fake.requests) == before




def test_scale_reviews_in_a_gunicorn_worker(tmp_path: Path, server_certs, fake):
    """The served path: gunicorn, TLS, cluster mode (namespaces watched, parents read with the
    kubeconfig's credentials)."""
    server = cluster_server(tmp_path, server_certs, fake.url)
    server.start(wait_ready=False)
    try:
        client = server.client()

        def ready() -> bool:
            try:
                return client.get_json("/readyz")[0] == 200
            except OSError:
                client.close()
                return False

        eventually(ready, timeout=60, what="readiness after the first list")
        sent = scale_review(8, 1)
        status, doc = client.post_review("validate", sent)
        got = check_response(doc, sent, "validate")
        assert status == 200 and got["allowed"] is False, got
        assert got["status"]["message"].startswith("[gang-required]"), got["status"]
        down = copy.deepcopy(scale_review(1, 1))
        status, doc = client.post_review("validate", down)
        assert status == 200 and check_response(doc, down, "validate")["allowed"] is True
        client.close()
    finally:
        assert server.stop() == 0
