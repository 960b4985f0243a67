"""scheduling-not-allowed and controller gangs through the real server (gunicorn, TLS, real sockets),
called the way the kube-apiserver calls it: ``/mutate``, the patch applied, ``/validate`` on the
stored object; a Deployment (validated only) straight to ``/validate``; an UPDATE with ``oldObject``.

As the apiserver stores them: the mutation keeps a user-set priorityClassName, so a batch pod naming
the inference class would be stored with it and preempt inference; ``/validate`` must deny it.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.server import objects
from tests.server.support import ApiserverClient, check_response, review, stored

pytestmark = pytest.mark.server


@pytest.fixture
def client(default_client: ApiserverClient) -> ApiserverClient:
    return default_client


def _validate(client: ApiserverClient, obj: dict, namespace: str, *, old: dict | None = None) -> dict[str, Any]:
    sent = review(obj, namespace=namespace, operation="UPDATE" if old is not None else "CREATE", old=old)
    status, doc = client.post_review("validate", sent)
    assert status == 200
    return check_response(doc, sent, "validate")


def _batch_pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "embed-0", "labels": {"gpu-admission.io/workload": "batch"}},
        "spec": {"containers": [{"name": "worker", "image": "registry.example/embed:1"}], **spec},
    }


def _training_statefulset(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "ddp"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "ddp"}},
            "template": {
                "metadata": {
                    "labels": {"app": "ddp", "gpu-admission.io/workload": "training"},
                    "annotations": {"gpu-admission.io/gpus": "8"},
                },
                "spec": {"containers": [{"name": "torch", "image": "registry.example/train:1"}]},
            },
        },
    }


def test_a_batch_pod_naming_the_inference_priority_is_denied_as_stored(client: ApiserverClient):
    final = stored(client, _batch_pod(priorityClassName="gpu-inference"), namespace=objects.SERVING_NS)
    assert final["spec"]["priorityClassName"] == "gpu-inference", "the mutation keeps what the user set"
    response = _validate(client, final, objects.SERVING_NS)
    assert response["allowed"] is False and response["status"]["code"] == 403
    message = response["status"]["message"]
    assert message.startswith("[scheduling-not-allowed] priorityClassName 'gpu-inference' is not allowed for class")
    assert message.endswith("(spec.priorityClassName)")


def test_the_class_priority_the_mutation_sets_is_admitted(client: ApiserverClient):
    final = stored(client, _batch_pod(), namespace=objects.SERVING_NS)
    assert final["spec"]["priorityClassName"] == "gpu-batch-preemptible"
    assert _validate(client, final, objects.SERVING_NS)["allowed"] is True


def test_a_statefulset_scaled_past_one_pod_without_a_gang_is_denied(client: ApiserverClient):
    one = _training_statefulset(1)
    assert _validate(client, one, objects.TRAINING_NS)["allowed"] is True
    four = copy.deepcopy(one)
    four["spec"]["replicas"] = 4
    response = _validate(client, four, objects.TRAINING_NS, old=one)
    assert response["allowed"] is False
    assert "[gang-required] 4 pods of class 'training' must start together" in response["status"]["message"]
    four["metadata"]["annotations"] = {"scheduling.volcano.sh/group-min-member": "4"}
    four["spec"]["template"]["spec"]["schedulerName"] = "volcano"
    assert _validate(client, four, objects.TRAINING_NS, old=one)["allowed"] is True
