"""Whole-pod GPU accounting through the real server (gunicorn, TLS, real sockets), called the way the
kube-apiserver calls it: ``/mutate``, the patch applied, ``/validate`` on the stored object; then
UPDATEs of what was stored, with ``oldObject``.

An UPDATE that adds nothing new is admitted, even when the stored object already breaks a class
limit (a pod created before the policy changed must keep updating its labels); one that adds GPUs in
a native sidecar is denied.
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


def _training_pod(sidecar_gpus: int | None = None) -> dict[str, Any]:
    side: dict[str, Any] = {"name": "log-shipper", "image": "registry.example/fluent-bit:3", "restartPolicy": "Always"}
    if sidecar_gpus is not None:
        side["resources"] = {"limits": {"nvidia.com/gpu": str(sidecar_gpus)}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "trainer-0",
            "labels": {"gpu-admission.io/workload": "training"},
            "annotations": {"gpu-admission.io/gpus": "8"},
        },
        "spec": {
            "initContainers": [side],
            "containers": [{"name": "trainer", "image": "registry.example/train:1"}],
        },
    }


def _validate(client: ApiserverClient, obj: dict, *, old: dict | None = None) -> dict[str, Any]:
    sent = review(obj, namespace=objects.TRAINING_NS, operation="UPDATE" if old is not None else "CREATE", old=old)
    status, doc = client.post_review("validate", sent)
    assert status == 200
    return check_response(doc, sent, "validate")


def _relabelled(obj: dict) -> dict:
    new = copy.deepcopy(obj)
    new["metadata"]["labels"]["team"] = "llm"
    return new


def test_a_gpu_sidecar_is_counted_at_create(client: ApiserverClient):
    final = stored(client, _training_pod(sidecar_gpus=4), namespace=objects.TRAINING_NS)
    response = _validate(client, final)
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert message.startswith("[gpu-count-exceeded] 12 GPUs per pod exceed class 'training''s maximum of 8")
    assert "4 in native sidecar 'log-shipper'" in message and "(spec.initContainers[0].resources)" in message


def test_an_update_adding_nothing_new_is_admitted(client: ApiserverClient):
    final = stored(client, _training_pod(), namespace=objects.TRAINING_NS)
    assert _validate(client, final)["allowed"] is True
    assert _validate(client, _relabelled(final), old=final)["allowed"] is True


def test_an_update_of_a_pod_already_over_the_limit_is_admitted(client: ApiserverClient):
    """Stored before the policy counted sidecars: the violation is not the update's doing."""
    before = stored(client, _training_pod(sidecar_gpus=4), namespace=objects.TRAINING_NS)
    assert _validate(client, before)["allowed"] is False  # what a CREATE would get today
    assert _validate(client, _relabelled(before), old=before)["allowed"] is True


def test_a_suspended_job_gaining_a_gpu_sidecar_is_denied(client: ApiserverClient):
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "pretrain"},
        "spec": {
            "suspend": True,
            "parallelism": 1,
            "template": {
                "metadata": {
                    "labels": {"gpu-admission.io/workload": "training"},
                    "annotations": {"gpu-admission.io/gpus": "8"},
                },
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "trainer", "image": "registry.example/train:1"}],
                },
            },
        },
    }
    old = stored(client, job, namespace=objects.TRAINING_NS)
    assert _validate(client, old)["allowed"] is True
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["initContainers"] = [
        {
            "name": "shadow",
            "image": "registry.example/x:1",
            "restartPolicy": "Always",
            "resources": {"limits": {"nvidia.com/gpu": "8"}},
        }
    ]
    response = _validate(client, new, old=old)
    assert response["allowed"] is False
    assert "[gpu-count-exceeded] 16 GPUs per pod" in response["status"]["message"]
    assert _validate(client, _relabelled_job(new), old=new)["allowed"] is True, "already stored: not news"


def _relabelled_job(obj: dict) -> dict:
    new = copy.deepcopy(obj)
    new["metadata"].setdefault("labels", {})["team"] = "llm"
    return new
