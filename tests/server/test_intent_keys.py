"""Intent typos at admission, through the real server: ``/validate`` answers with the warning kubectl
shows (the key meant first), for a class pod and for a pod whose only intent key sits on the wrong side."""

from __future__ import annotations

import pytest

from tests.server.support import ApiserverClient, check_response, review, stored

pytestmark = pytest.mark.server


def _validate(client: ApiserverClient, meta: dict) -> dict:
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nb", **meta},
        "spec": {"containers": [{"name": "nb", "image": "jupyter"}]},
    }
    sent = review(stored(client, obj), namespace="default")  # as the apiserver calls: /mutate, then /validate
    status, doc = client.post_review("validate", sent)
    assert status == 200, doc
    return check_response(doc, sent, "validate")


def test_a_typo_is_a_warning_at_admission(default_client: ApiserverClient):
    response = _validate(
        default_client,
        {"labels": {"gpu-admission.io/workload": "dev"}, "annotations": {"gpu-admission.io/gpu-mem": "4Gi"}},
    )
    assert response["allowed"] is True
    (warning,) = response["warnings"]
    assert warning.startswith("[intent-unknown-key] did you mean gpu-admission.io/gpu-memory?")


def test_the_workload_key_as_an_annotation_is_a_warning_at_admission(default_client: ApiserverClient):
    response = _validate(default_client, {"annotations": {"gpu-admission.io/workload": "dev"}})
    assert response["allowed"] is True
    (warning,) = response["warnings"]
    assert warning.startswith("[intent-unknown-key] move gpu-admission.io/workload to metadata.labels")
