"""DRA claims through the real server: the scheduler's extended-resource-claim marker is judged by who
sends it (``request.userInfo``), and device-taint tolerations are denied at admission, on ResourceClaims
and ResourceClaimTemplates alike."""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.upstream_dra import EXTENDED_RESOURCE_CLAIM_ANNOTATION, SCHEDULER_USERNAME
from tests.server.support import ApiserverClient, check_response, review


@pytest.fixture
def client(default_client: ApiserverClient) -> ApiserverClient:
    return default_client


def claim(kind: str, *, marker: bool = False, tolerations: list | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com"}
    if tolerations is not None:
        exactly["tolerations"] = tolerations
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "pod-0-extended-resources-x7k9p", "namespace": "default"},
        "spec": spec if kind == "ResourceClaim" else {"spec": spec},
    }
    if marker:
        annotations = {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
        if kind == "ResourceClaim":
            obj["metadata"]["annotations"] = annotations
        else:
            obj["spec"]["metadata"] = {"annotations": annotations}
    return obj


def send(client: ApiserverClient, obj: dict[str, Any], username: str, **kw: Any) -> dict[str, Any]:
    sent = review(obj, **kw)
    sent["request"]["userInfo"] = {"username": username, "groups": ["system:authenticated"]}
    sent["request"]["resource"]["resource"] = obj["kind"].lower() + "s"
    status, doc = client.post_review("validate", sent)
    assert status == 200
    return check_response(doc, sent, "validate")


@pytest.mark.parametrize("kind", ["ResourceClaim", "ResourceClaimTemplate"])
def test_the_marker_is_accepted_from_the_scheduler_only(client, kind):
    assert send(client, claim(kind, marker=True), SCHEDULER_USERNAME)["allowed"] is True
    denied = send(client, claim(kind, marker=True), "alice")
    assert denied["allowed"] is False
    message = denied["status"]["message"]
    assert message.startswith("[scheduler-claim-forged] remove the annotation " + EXTENDED_RESOURCE_CLAIM_ANNOTATION)
    assert "'alice'" in message
    # a service account is not the scheduler either
    sa = send(client, claim(kind, marker=True), "system:serviceaccount:default:builder")
    assert sa["allowed"] is False
    assert send(client, claim(kind), "alice")["allowed"] is True  # no marker: nothing to judge


def test_an_update_adding_the_marker_is_denied(client):
    before = claim("ResourceClaim")
    response = send(client, claim("ResourceClaim", marker=True), "alice", operation="UPDATE", old=before)
    assert response["allowed"] is False and "scheduler-claim-forged" in response["status"]["message"]


@pytest.mark.parametrize("kind", ["ResourceClaim", "ResourceClaimTemplate"])
def test_device_taint_tolerations_are_denied_at_admission(client, kind):
    blanket = send(client, claim(kind, tolerations=[{"operator": "Exists"}]), "alice")
    assert blanket["allowed"] is False
    assert "[device-taint-tolerated]" in blanket["status"]["message"]
    assert "every device taint" in blanket["status"]["message"]
    informational = [{"key": "gpu.nvidia.com/unmonitored", "operator": "Exists"}]
    assert send(client, claim(kind, tolerations=informational), "alice")["allowed"] is True
