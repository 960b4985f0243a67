"""Policy exceptions through the real server (gunicorn, TLS, ``--grant-key``), called the way the
kube-apiserver calls it: ``request.userInfo`` of users, groups, service accounts and the controllers that
create pods; ``/mutate`` writes the grant on a controller's template, the apiserver stores the patched
object, the controller's pods carry it to ``/validate``. Each forgery attempt is denied.

The policy is ``tests/engine/policies/exceptions``; its expiry is 2027-01-31, so these tests hold until
that day of the real clock the server reads (the expiry at a fixed clock is in tests/engine).
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from tests.deploy.cel_match import CALL, Webhook
from tests.engine.test_exceptions import GRANT, POLICY_DIR, a_deployment, a_pod, pod_of, replicaset_of
from tests.server.support import (
    ROOT,
    ApiserverClient,
    ServerProcess,
    check_response,
    eventually,
    patch_ops,
    review,
    serve_args,
)
from webhook.policy import load_policy
from webhook.render import render

pytestmark = pytest.mark.server

NS = "diag"
ALICE = {"username": "alice", "groups": ["system:authenticated"]}
MALLORY = {"username": "mallory", "groups": ["system:authenticated", "tenants"]}
DIAG_GROUP = {"username": "dave", "groups": ["system:authenticated", "gpu-diagnostics"]}
DEPLOYER = {
    "username": "system:serviceaccount:ci:deployer",
    "uid": "0c7d4e44-2f4b-4a8e-9d55-1f6f0a7b9c11",
    "groups": ["system:serviceaccounts", "system:serviceaccounts:ci", "system:authenticated"],
}


def controller(name: str) -> dict[str, Any]:
    return {
        "username": f"system:serviceaccount:kube-system:{name}",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, server_certs) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("exceptions")
    (work / "namespaces.yaml").write_text("diag: {team: diag}\nweb: {team: web}\n")
    (work / "grant-key").write_text("# exception grants (openssl rand -hex 32)\n" + "5f" * 32 + "\n")
    proc = ServerProcess(
        work,
        serve_args(
            server_certs,
            "--namespace-labels", str(work / "namespaces.yaml"),
            "--grant-key", str(work / "grant-key"),
            "--workers", "1",
            "--threads", "2",
            policy=POLICY_DIR,
        ),
        ca_files=[server_certs.ca_cert],
    )  # fmt: skip
    proc.start()
    yield proc
    assert proc.stop() == 0, proc.output()[-3000:]


@pytest.fixture
def client(server: ServerProcess) -> Iterator[ApiserverClient]:
    c = server.client()
    yield c
    c.close()


def call(client: ApiserverClient, endpoint: str, obj: dict, who: dict, **kw: Any) -> dict[str, Any]:
    sent = review(obj, namespace=NS, user_info=who, **kw)
    status, doc = client.post_review(endpoint, sent)
    assert status == 200, doc
    return check_response(doc, sent, endpoint)


def admit(client: ApiserverClient, obj: dict, who: dict, **kw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """/mutate, the patch applied as the apiserver stores it, /validate: (stored object, response)."""
    mutated = call(client, "mutate", obj, who, **kw)
    stored = jsonpatch.apply_patch(obj, patch_ops(mutated)) if "patch" in mutated else copy.deepcopy(obj)
    return stored, call(client, "validate", stored, who, **kw)


def denied_for_privileged(response: dict[str, Any]) -> bool:
    return response["allowed"] is False and "[privileged-gpu]" in response["status"]["message"]


@pytest.mark.parametrize("who", [ALICE, DIAG_GROUP, DEPLOYER], ids=["user", "group", "service-account"])
def test_a_subjects_pod_is_admitted_with_an_audit_entry_naming_the_exception(client, who):
    _, response = admit(client, a_pod(), who)
    assert response["allowed"] is True
    notes = response["auditAnnotations"]
    assert notes["exceptions"] == "dcgm-diag: privileged-gpu, raw-gpu-request"
    assert notes["privileged-gpu"].endswith("[exception dcgm-diag]")
    assert "warnings" not in response


def test_anyone_else_is_denied(client):
    _, response = admit(client, a_pod(), MALLORY)
    assert denied_for_privileged(response)


def test_the_chain_deployment_replicaset_pod(client, server):
    stored, response = admit(client, a_deployment(), DEPLOYER)
    assert response["allowed"] is True and response["auditAnnotations"]["exceptions"].startswith("dcgm-diag")
    assert GRANT in stored["spec"]["template"]["metadata"]["annotations"]
    rs, response = admit(client, replicaset_of(stored), controller("deployment-controller"))
    assert response["allowed"] is True and rs == replicaset_of(stored)  # the grant kept as carried
    before = server.metric("gpu_admission_exception_uses_total", exception="dcgm-diag", rule="privileged-gpu")
    pod, response = admit(client, pod_of(rs), controller("replicaset-controller"), uid="exception-chain-pod")
    assert response["allowed"] is True
    assert response["auditAnnotations"]["exceptions"] == "dcgm-diag: privileged-gpu, raw-gpu-request"
    assert server.metric("gpu_admission_exception_uses_total", exception="dcgm-diag", rule="privileged-gpu") == (
        before + 1
    )
    def validate_lines() -> list[dict[str, Any]]:  # the /mutate line may be written before this one
        return [d for d in server.decisions("exception-chain-pod") if d["endpoint"] == "validate"]

    eventually(lambda: bool(validate_lines()), what="the /validate decision line")
    (line,) = validate_lines()
    assert line["exceptions"] == {"dcgm-diag": ["privileged-gpu", "raw-gpu-request"]}

    # the garbage collector orphans it (UPDATE without the owner reference): nothing new, admitted
    orphan = copy.deepcopy(pod)
    del orphan["metadata"]["ownerReferences"]
    response = call(client, "validate", orphan, controller("generic-garbage-collector"), operation="UPDATE", old=pod)
    assert response["allowed"] is True

    # forgery: the tenant copies that pod, grant and owner reference included, and creates it itself
    copied = copy.deepcopy(pod)
    copied["metadata"]["name"] = "copied"
    assert denied_for_privileged(call(client, "validate", copied, MALLORY))


def test_forgery_a_pod_naming_the_excepted_service_account(client):
    pod = a_pod()
    assert pod["spec"]["serviceAccountName"] == "deployer"
    _, response = admit(client, pod, MALLORY)
    assert denied_for_privileged(response)


def test_forgery_a_copied_grant_in_the_tenants_deployment_is_stripped_and_denied(client):
    stored, _ = admit(client, a_deployment(), DEPLOYER)
    theirs = a_deployment("mine")
    theirs["spec"]["template"]["metadata"]["annotations"] = {GRANT: stored["spec"]["template"]["metadata"][
        "annotations"][GRANT]}  # fmt: skip
    mutated = call(client, "mutate", theirs, MALLORY)
    assert {"op": "remove", "path": "/spec/template/metadata/annotations/gpu-admission.io~1exception-grant"} in (
        patch_ops(mutated)
    )
    assert denied_for_privileged(call(client, "validate", theirs, MALLORY))  # had /mutate been skipped
    pod = pod_of(replicaset_of(theirs))  # ...and the pods its ReplicaSet would create
    _, response = admit(client, pod, controller("replicaset-controller"))
    assert denied_for_privileged(response)


def test_forgery_an_update_that_edits_the_granted_template(client):
    granted, _ = admit(client, a_deployment(), DEPLOYER)
    edited = copy.deepcopy(granted)
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example/miner:1"
    mutated = call(client, "mutate", edited, MALLORY, operation="UPDATE", old=granted)
    assert [op["op"] for op in patch_ops(mutated)] == ["remove"]  # the stale grant goes
    response = call(client, "validate", edited, MALLORY, operation="UPDATE", old=granted)
    assert denied_for_privileged(response)


def test_forgery_impersonated_extras_and_a_controller_without_a_grant(client):
    who = {**MALLORY, "extra": {"authentication.kubernetes.io/pod-name": ["dcgm-7c9f5d8b4-abcde"]}}
    assert denied_for_privileged(admit(client, a_pod(), who)[1])
    assert denied_for_privileged(admit(client, a_pod(), controller("replicaset-controller"))[1])


def test_a_subjects_deployment_the_mutating_webhook_missed_is_denied_with_the_reason(client):
    response = call(client, "validate", a_deployment(), DEPLOYER)
    assert denied_for_privileged(response)
    assert "lacks its grant" in response["status"]["message"]


def test_a_review_without_user_info_holds_no_exception(client):
    sent = review(a_pod(), namespace=NS)
    del sent["request"]["userInfo"]
    status, doc = client.post_review("mutate", sent)
    stored = jsonpatch.apply_patch(a_pod(), patch_ops(check_response(doc, sent, "mutate")))
    sent = review(stored, namespace=NS)
    del sent["request"]["userInfo"]
    status, doc = client.post_review("validate", sent)
    assert status == 200 and denied_for_privileged(check_response(doc, sent, "validate"))


def test_outside_the_selected_namespaces_the_rule_holds(client):
    sent = review(a_pod(), namespace="web", user_info=ALICE)
    status, doc = client.post_review("validate", sent)
    assert status == 200 and denied_for_privileged(check_response(doc, sent, "validate"))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("", "holds no key"),
        ("short\n", "fewer than 16"),
    ],
)
def test_a_bad_grant_key_file_stops_serve_with_exit_2(tmp_path: Path, content: str | None, message: str):
    key = tmp_path / "grant-key"
    if content is not None:
        key.write_text(content)
    run = subprocess.run(
        [sys.executable, "-m", "webhook", "serve", "--metrics-bind", "off", "--policy", str(POLICY_DIR),
         "--grant-key", str(key), "--bind", "127.0.0.1:1"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 2
    assert "--grant-key" in run.stderr and message in run.stderr and "Traceback" not in run.stderr


def test_each_exceptions_expiry_is_a_gauge_for_the_alert(server):
    """``GPUAdmissionExceptionExpiring`` (manifests/monitoring) fires a week ahead on this gauge."""
    name = "gpu_admission_exception_expiry_timestamp_seconds"
    day = server.metric(name, exception="dcgm-diag", owner="platform-team")
    assert day == datetime(2027, 1, 31, tzinfo=UTC).timestamp()
    assert server.metric(name, exception="nightly-only") == day


# --- issue 41: grants bound to what the pods run, and to the kinds controllers create -------------------------


def granted_pod(client: ApiserverClient) -> dict[str, Any]:
    """A pod of the subject's Deployment, through the server's /mutate and /validate at every step."""
    stored, _ = admit(client, a_deployment(), DEPLOYER)
    rs, _ = admit(client, replicaset_of(stored), controller("deployment-controller"))
    pod, response = admit(client, pod_of(rs), controller("replicaset-controller"))
    assert response["allowed"] is True and "dcgm-diag" in response["auditAnnotations"]["exceptions"]
    pod["metadata"]["name"] = "dcgm-7c9f5d8b4-x9z4q"
    return pod


def validating_webhook() -> Webhook:
    docs = render(load_policy(POLICY_DIR))
    (hook,) = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")["webhooks"]
    return Webhook(hook)


def test_attack_an_image_swap_of_a_granted_pod_is_sent_and_denied(client):
    pod = granted_pod(client)
    swapped = copy.deepcopy(pod)
    swapped["spec"]["containers"][0]["image"] = "registry.example/miner:1"
    assert validating_webhook().decide(swapped, operation="UPDATE", old=pod) == CALL  # the rendered conditions
    for who in (MALLORY, controller("replicaset-controller")):
        response = call(client, "validate", swapped, who, operation="UPDATE", old=pod)
        assert denied_for_privileged(response) and "[exception" not in response["status"]["message"]
    relabelled = copy.deepcopy(pod)  # an UPDATE that leaves what it runs alone keeps the grant
    relabelled["metadata"]["labels"]["phase"] = "diagnosing"
    assert call(client, "validate", relabelled, MALLORY, operation="UPDATE", old=pod)["allowed"] is True


def test_attack_a_controller_created_pod_under_an_owner_of_the_wrong_kind(client):
    pod = granted_pod(client)
    for kind, name, api in (("ConfigMap", "dcgm-abc12", "v1"), ("Deployment", "dcgm", "apps/v1")):
        forged = copy.deepcopy(pod)
        forged["metadata"]["ownerReferences"] = [
            {"apiVersion": api, "kind": kind, "name": name, "uid": "f-1", "controller": True}
        ]
        assert denied_for_privileged(call(client, "validate", forged, controller("replicaset-controller"))), kind
