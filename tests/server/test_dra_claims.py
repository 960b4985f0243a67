"""DRA claims through the real server: the scheduler's extended-resource-claim marker is judged by who
sends it (``request.userInfo``), and device-taint tolerations are denied at admission, on ResourceClaims
and ResourceClaimTemplates alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.deploy.cel_match import CALL, Webhook
from tests.engine.upstream_dra import EXTENDED_RESOURCE_CLAIM_ANNOTATION, SCHEDULER_USERNAME
from tests.server.support import ApiserverClient, ServerProcess, check_response, review, serve_args
from tests.server.test_e2e import admit


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
    sent["request"]["namespace"] = kw.get("namespace", sent["request"].get("namespace"))
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


# --- a template created after its pod (the pod was admitted with claim-unresolved) -----------------------

STRICT_NS = "strict-serving"  # inference and batch only, raw GPU requests denied: every pod has a class max


@pytest.fixture(scope="module")
def strict_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    doc = yaml.safe_load((ROOT / "examples" / "dra-policy" / "policy.yaml").read_text())
    doc["spec"]["rules"]["raw-gpu-request"]["namespaces"] = [
        {"selector": {"matchLabels": {"gpu-admission.io/raw-gpus": "denied"}}, "action": "deny"}
    ]
    directory = tmp_path_factory.mktemp("strict-policy")
    (directory / "policy.yaml").write_text(yaml.safe_dump(doc))
    return directory


@pytest.fixture(scope="module")
def strict_client(tmp_path_factory: pytest.TempPathFactory, server_certs, strict_policy: Path):
    namespaces = tmp_path_factory.mktemp("strict-ns") / "namespaces.yaml"
    namespaces.write_text(
        yaml.safe_dump({STRICT_NS: {"gpu-admission.io/tier": "serving", "gpu-admission.io/raw-gpus": "denied"}})
    )
    proc = ServerProcess(
        tmp_path_factory.mktemp("strict-server"),
        serve_args(server_certs, "--namespaces", str(namespaces), "--workers", "1", "--threads", "2",
                   policy=strict_policy),
        ca_files=[server_certs.ca_cert],
    )
    proc.start()
    client = proc.client()
    yield client
    client.close()
    assert proc.stop() == 0, proc.output()[-3000:]


def _validating_webhook(policy_dir: Path) -> Webhook:
    from webhook.policy import load_policy
    from webhook.render import RenderOptions, render

    docs = render(load_policy(policy_dir), RenderOptions())
    (hook,) = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")["webhooks"]
    return Webhook(hook)


def _template(name: str, **exactly: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": STRICT_NS},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                               **exactly}}]}}},
    }


def test_a_template_created_after_its_pod_is_sent_and_judged(strict_client, strict_policy):
    """The attack, through the rendered matchConditions and the live server: an inference pod names a
    template that does not exist yet (admitted, warned); the template then asks for every GPU of a node."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "infer", "labels": {"gpu-admission.io/workload": "inference"},
                     "annotations": {"gpu-admission.io/isolation": "exclusive"}},
        "spec": {
            "resourceClaims": [{"name": "extra", "resourceClaimTemplateName": "every-gpu"}],
            "containers": [{"name": "main", "image": "registry.example/app:1",
                            "resources": {"claims": [{"name": "extra"}], "limits": {"cpu": "1", "memory": "1Gi"},
                                          "requests": {"cpu": "1", "memory": "1Gi"}}}],
        },
    }
    _, _, first = admit(strict_client, pod, STRICT_NS)  # /mutate, then /validate of what it made
    assert first["allowed"] is True, first
    assert any("claim-unresolved" in w for w in first.get("warnings", ())), first
    hook = _validating_webhook(strict_policy)
    every = _template("every-gpu", allocationMode="All")
    assert hook.decide(every, user_info={"username": "alice", "groups": ["system:authenticated"]}) == CALL
    denied = send(strict_client, every, "alice", namespace=STRICT_NS)
    assert denied["allowed"] is False
    assert denied["status"]["message"].startswith("[gpu-count-exceeded] ResourceClaimTemplate every-gpu request 'gpu' "
                                                  "has allocationMode All")
    assert send(strict_client, _template("eight", count=8), "alice", namespace=STRICT_NS)["allowed"] is False
    admin = send(strict_client, _template("watch", adminAccess=True), "alice", namespace=STRICT_NS)
    assert admin["allowed"] is False and "[privileged-gpu]" in admin["status"]["message"]
    assert send(strict_client, _template("two", count=2), "alice", namespace=STRICT_NS)["allowed"] is True
