"""``settings.enforcement: warn|audit`` through the real server (gunicorn, TLS): nothing is denied, and
everything enforce would deny is on the record, in the AdmissionReview response, the decision log and
the metrics.

Each server runs the shipped policy with ``failure: deny`` (an observe mode must not block even then)
and a fault-injection ``sitecustomize`` (as in ``test_fail_closed``) that makes the engine raise for
objects carrying ``FAULT``. The audit server also has ``mutation: off``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import POLICIES
from tests.server import objects
from tests.server.support import ServerProcess, check_response, review, serve_args
from tests.server.test_fail_closed import FAULT, SITECUSTOMIZE

pytestmark = pytest.mark.server


@pytest.fixture(scope="module", params=["warn", "audit"])
def server(request, tmp_path_factory, server_certs, namespaces_file) -> Iterator[ServerProcess]:
    mode = request.param
    tmp = tmp_path_factory.mktemp(f"enforcement-{mode}")
    inject = tmp / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SITECUSTOMIZE)
    policy = tmp / "policy"
    policy.mkdir()
    text = (POLICIES / "default.yaml").read_text()
    settings = f"failure: deny\n    enforcement: {mode}"
    if mode == "audit":
        settings += "\n    mutation: off"
    (policy / "default.yaml").write_text(text.replace("failure: allow", settings, 1))
    proc = ServerProcess(
        Path(tmp),
        serve_args(server_certs, "--namespaces", str(namespaces_file), "--workers", "1", policy=policy),
        ca_files=[server_certs.ca_cert],
        env={"PYTHONPATH": str(inject)},
    )
    proc.mode = mode  # type: ignore[attr-defined]
    proc.start()
    yield proc
    assert proc.stop() == 0, proc.output()[-3000:]


def _attack(fault: bool = False) -> dict:
    """Privileged, not entitled to training in ``serving``, bound by hand: enforce denies it three times."""
    pod = objects.inference_pod()
    pod["metadata"]["labels"]["gpu-admission.io/workload"] = "training"
    pod["spec"]["nodeName"] = "gpu-node-1"
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    if fault:
        pod["metadata"]["annotations"][FAULT] = "1"
    return pod


def _post(server: ServerProcess, endpoint: str, obj: dict) -> tuple[dict, dict]:
    client = server.client()
    try:
        sent = review(obj, namespace=objects.SERVING_NS)
        status, doc = client.post_review(endpoint, sent)
    finally:
        client.close()
    assert status == 200
    return sent, check_response(doc, sent, endpoint)


def test_the_attack_is_admitted_on_the_record(server):
    sent, response = _post(server, "validate", _attack())
    assert response["allowed"] is True
    audit = response["auditAnnotations"]
    for rule in ("class-not-allowed", "privileged-gpu", "node-name-set"):
        assert audit[rule].endswith("[would deny]"), audit[rule]
    would = [w for w in response.get("warnings", []) if ", would deny] " in w]
    if server.mode == "warn":
        assert {w.split(",")[0] for w in would} >= {"[class-not-allowed", "[privileged-gpu", "[node-name-set"}
    else:
        assert would == [], "audit mode shows the user nothing"
    decision = "warned" if server.mode == "warn" else "audited"
    assert server.wait_metric("gpu_admission_requests_total", 1, endpoint="validate", decision=decision) >= 1
    assert (
        server.wait_metric("gpu_admission_would_deny_total", 1, rule="privileged-gpu", enforcement=server.mode) >= 1
    )
    assert server.metric("gpu_admission_rule_violations_total", rule="privileged-gpu", action="deny", kind="Pod") == 0
    (line,) = server.decisions(sent["request"]["uid"])
    assert line["decision"] == decision and line["allowed"] is True
    assert {"class-not-allowed", "privileged-gpu", "node-name-set"} <= set(line["rules"])


def test_an_engine_error_at_validate_is_admitted_on_the_record(server):
    sent, response = _post(server, "validate", _attack(fault=True))
    assert response["allowed"] is True
    note = response["auditAnnotations"]["engine-error"]
    assert "could not evaluate this object (ZeroDivisionError)" in note and note.endswith("[would deny]")
    assert sent["request"]["uid"] in note
    warned = [w for w in response.get("warnings", []) if w.startswith("[engine-error, would deny]")]
    assert len(warned) == (1 if server.mode == "warn" else 0)
    assert server.wait_metric("gpu_admission_engine_errors_total", 1, endpoint="validate", failure="allow") >= 1
    assert server.wait_metric("gpu_admission_would_deny_total", 1, rule="engine-error", enforcement=server.mode) >= 1
    (line,) = server.decisions(sent["request"]["uid"])
    assert line["decision"] == "error" and line["allowed"] is True and line["rules"] == ["engine-error"]


def test_an_engine_error_at_mutate_does_not_block_though_failure_says_deny(server):
    sent, response = _post(server, "mutate", _attack(fault=True))
    assert response == {"uid": sent["request"]["uid"], "allowed": True}


def test_mutate_patches_unless_mutation_is_off(server):
    pod = objects.inference_pod()
    client = server.client()
    try:
        sent = review(pod, namespace="default")
        status, doc = client.post_review("mutate", sent)
    finally:
        client.close()
    assert status == 200
    response = check_response(doc, sent, "mutate")
    if server.mode == "audit":  # mutation: off
        assert "patch" not in response
    else:
        assert "patch" in response


def test_with_mutation_off_an_unplaced_class_pod_is_not_recorded_as_would_deny(server):
    """The stored object is what the user wrote (nothing patched it): judged as our patch would have left
    it, so the record says what enforce with mutation would deny, not placement-missing for every pod."""
    if server.mode != "audit":
        pytest.skip("the audit server runs mutation: off")
    client = server.client()
    try:
        sent = review(objects.inference_pod(), namespace="default")
        status, doc = client.post_review("validate", sent)
    finally:
        client.close()
    assert status == 200
    response = check_response(doc, sent, "validate")
    assert response["allowed"] is True
    assert "placement-missing" not in response.get("auditAnnotations", {})


def test_a_scale_whose_object_cannot_be_read_is_admitted_on_the_record(tmp_path):
    """In process (no apiserver to read the parent from): enforce denies the unjudged scale, an observe
    mode admits it with the record, and its message no longer claims it is never admitted."""
    from tests.server.test_scale_reviews import answer, scale_review
    from webhook.server.admission import Admitter
    from webhook.server.namespaces import OfflineNamespaces
    from webhook.server.reload import PolicyStore

    policy = tmp_path / "policy"
    policy.mkdir()
    text = (POLICIES / "default.yaml").read_text()
    (policy / "default.yaml").write_text(text.replace("failure: allow", "failure: allow\n    enforcement: warn", 1))
    got = answer(Admitter(PolicyStore.load(policy), OfflineNamespaces()), scale_review(8, 1))
    assert got["allowed"] is True
    note = got["auditAnnotations"]["engine-error"]
    assert "no access to the cluster" in note and note.endswith("[would deny]") and "never admitted" not in note
    assert got["warnings"][0].startswith("[engine-error, would deny] ")
    enforced = answer(Admitter(PolicyStore.load(POLICIES), OfflineNamespaces()), scale_review(8, 1))
    assert enforced["allowed"] is False
