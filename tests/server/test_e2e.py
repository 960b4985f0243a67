"""End to end against ``python -m webhook serve`` (gunicorn, 2 gthread workers, TLS) with a client that
calls it the way the kube-apiserver does: mutate, apply the patch, validate the final object, re-invoke
mutate (``reinvocationPolicy: IfNeeded``) and expect nothing more to change.

One server for the module; every test also checks the contract field by field (``check_response``).
"""

from __future__ import annotations

import copy
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest

from tests.conftest import POLICIES
from tests.server import objects
from tests.server.support import (
    ApiserverClient,
    ServerProcess,
    check_response,
    client_context,
    patch_ops,
    review,
    serve_args,
    stored,
)
from webhook.engine import Request, report
from webhook.policy import load_policy

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, server_certs, namespaces_file: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("e2e"),
        serve_args(
            server_certs,
            "--namespace-labels",
            str(namespaces_file),
            "--workers",
            "2",
            "--threads",
            "4",
        ),
        ca_files=[server_certs.ca_cert],
    )
    proc.start()
    yield proc
    assert proc.stop() == 0, proc.output()[-3000:]
    unexpected = [r for r in proc.log_records() if "exception" in r and not r["msg"].startswith("engine error")]
    assert not unexpected, f"only engine errors carry a traceback: {unexpected}"
    assert all(line.startswith("{") for line in proc.output().splitlines()), "every log line is JSON"


@pytest.fixture
def client(server: ServerProcess) -> Iterator[ApiserverClient]:
    c = server.client()
    yield c
    c.close()


def admit(client: ApiserverClient, obj: dict[str, Any], namespace: str) -> tuple[dict[str, Any], dict, dict]:
    """The apiserver's sequence for one CREATE: returns (final object, mutate response, validate response)."""
    sent = review(obj, namespace=namespace)
    status, doc = client.post_review("mutate", sent)
    assert status == 200
    mutated = check_response(doc, sent, "mutate")
    assert mutated["allowed"] is True, "/mutate never denies"
    final = jsonpatch.apply_patch(obj, patch_ops(mutated)) if "patch" in mutated else obj

    again = review(final, namespace=namespace)
    status, doc = client.post_review("mutate", again)
    assert status == 200
    assert "patch" not in check_response(doc, again, "mutate"), "mutating our own output changes nothing"

    sent = review(final, namespace=namespace)
    status, doc = client.post_review("validate", sent)
    assert status == 200
    return final, mutated, check_response(doc, sent, "validate")


# --- the apiserver round trip ------------------------------------------------------------------------


def test_inference_pod_gets_a_mig_slice(client: ApiserverClient, server: ServerProcess):
    pod = objects.inference_pod()
    final, mutated, validated = admit(client, pod, objects.SERVING_NS)
    ops = patch_ops(mutated)
    assert {"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1mig-1g.5gb", "value": "1"} in ops
    container = final["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/mig-1g.5gb": "1"}
    assert final["spec"]["nodeSelector"] == {"workload": "gpu-infer"}
    assert final["spec"]["priorityClassName"] == "gpu-inference"
    assert validated == {"uid": validated["uid"], "allowed": True}, "Guaranteed, entitled: nothing to say"
    assert client.handshakes == 1, "three reviews over one kept-alive TLS connection"


def test_volcano_training_job_in_a_training_namespace(client: ApiserverClient):
    job = objects.training_vcjob()
    final, _, validated = admit(client, job, objects.TRAINING_NS)
    assert validated["allowed"] is True
    assert final["spec"]["schedulerName"] == "volcano"
    template = final["spec"]["tasks"][0]["template"]
    limits = template["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "8"
    assert limits["rdma/rdma_shared_device_a"] == "1"
    assert template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "rdma-net-a@net1"
    assert template["spec"]["nodeSelector"] == {"workload": "gpu-train"}


def test_the_same_job_elsewhere_is_denied_by_namespace_entitlement(client: ApiserverClient):
    """The namespaces file is what makes ``serving`` a serving-only namespace (the default restricts it)."""
    _, mutated, validated = admit(client, objects.training_vcjob(), objects.SERVING_NS)
    assert "patch" not in mutated
    assert validated["allowed"] is False
    assert validated["status"]["message"].startswith("[class-not-allowed] namespace 'serving' is not entitled")


def test_chapter_job_with_half_a_gang_is_denied_with_403(client: ApiserverClient):
    job = objects.qwen_job(min_available=4)
    final, _, validated = admit(client, job, objects.TRAINING_NS)
    expected = report(
        load_policy(POLICIES),
        Request(
            final,
            operation="CREATE",
            namespace=objects.TRAINING_NS,
            namespace_labels={"gpu-admission.io/tier": "training", "team": "llm"},
        ),
    )
    assert validated["allowed"] is False
    assert validated["status"] == {"code": 403, "reason": "Forbidden", "message": expected.message}
    assert validated["status"]["message"].startswith("[gang-incomplete] minAvailable 4 < 8 replicas")

    ok = objects.qwen_job(min_available=8)
    _, _, validated = admit(client, ok, objects.TRAINING_NS)
    assert validated["allowed"] is True


def test_every_violation_is_listed_and_warnings_ride_along(client: ApiserverClient):
    pod = objects.node_name_pod()
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1.5"
    _, _, validated = admit(client, pod, "default")
    message = validated["status"]["message"]
    assert message.startswith("[extended-resource] ")
    assert "; [node-name-set] " in message
    assert any(w.startswith("[raw-gpu-request]") for w in validated["warnings"])


def test_raw_request_is_pinned_and_admitted_with_a_warning(client: ApiserverClient):
    final, mutated, validated = admit(client, objects.raw_gpu_pod(), "default")
    ops = patch_ops(mutated)
    assert ops and all(op["path"].startswith(("/spec/nodeSelector", "/spec/tolerations")) for op in ops), ops
    assert final["spec"]["nodeSelector"], "pinned to an entitled pool that offers its GPUs"
    assert validated["allowed"] is True
    (warning,) = [w for w in validated["warnings"] if w.startswith("[raw-gpu-request]")]
    assert warning.startswith("[raw-gpu-request] add label gpu-admission.io/workload: <class>"), "the fix first"
    assert validated["auditAnnotations"]["raw-gpu-request"].startswith("[raw-gpu-request] GPUs requested without")


def test_dry_run_and_other_operations(client: ApiserverClient, server: ServerProcess):
    pod = objects.node_name_pod()
    dry = review(stored(client, pod), dry_run=True)
    _, doc = client.post_review("validate", dry)
    assert check_response(doc, dry, "validate")["status"]["message"].startswith("[node-name-set]")
    assert server.decisions(dry["request"]["uid"])[0]["dry_run"] is True

    for sent in (
        review(None, operation="DELETE", old=pod),
        review(objects.inference_pod(), operation="UPDATE", old=objects.inference_pod()),
        review({"apiVersion": "v1", "kind": "PodExecOptions"}, operation="CONNECT"),
    ):
        _, doc = client.post_review("mutate", sent)
        assert check_response(doc, sent, "mutate") == {"uid": sent["request"]["uid"], "allowed": True}


def test_one_json_log_line_per_decision_without_bodies(client: ApiserverClient, server: ServerProcess):
    pod = objects.inference_pod()
    sent = review(pod, namespace=objects.SERVING_NS)
    client.post_review("mutate", sent)
    sent2 = review(stored(client, objects.node_name_pod()), namespace="default")
    client.post_review("validate", sent2)

    [mutate_line] = server.decisions(sent["request"]["uid"])
    assert mutate_line["endpoint"] == "mutate" and mutate_line["operation"] == "CREATE"
    assert mutate_line["kind"] == "Pod" and mutate_line["namespace"] == objects.SERVING_NS
    assert mutate_line["name"] == "llm-server-7d9c5b-"
    assert mutate_line["allowed"] is True and mutate_line["patch_ops"] == 4
    assert 0 < mutate_line["latency_ms"] < 1000
    [validate_line] = server.decisions(sent2["request"]["uid"])
    assert validate_line["allowed"] is False and sorted(validate_line["rules"]) == ["node-name-set", "raw-gpu-request"]
    log = server.output()
    for secret in ("s3cr3t-do-not-log", "nvcr.io/nim/meta", "gpu-node-17"):
        assert secret not in log, "objects never reach the log"


# --- malformed input ------------------------------------------------------------------------------


def _valid() -> bytes:
    return orjson.dumps(review(objects.inference_pod()))


def _edit(change) -> bytes:
    doc = review(objects.inference_pod())
    change(doc)
    return orjson.dumps(doc)


def _deep_object() -> bytes:
    """A review whose object holds a 900-level value: parses (under orjson's 1024 limit), reaches the engine."""
    doc = review(objects.inference_pod())
    doc["request"]["object"]["metadata"]["annotations"]["x"] = "PLACEHOLDER"
    return orjson.dumps(doc).replace(b'"PLACEHOLDER"', b"[" * 900 + b"]" * 900)


MALFORMED = [
    # (id, method, path, body, content type, expected status, fragment of the JSON message)
    ("not-json", "POST", "/mutate", b"this is not json", "application/json", 400, "not valid JSON"),
    ("empty-body", "POST", "/validate", b"", "application/json", 400, "not valid JSON"),
    ("truncated", "POST", "/mutate", _valid()[:-7], "application/json", 400, "not valid JSON"),
    ("bad-utf8", "POST", "/mutate", b'{"a": "\xff"}', "application/json", 400, "not valid JSON"),
    ("wrong-content-type", "POST", "/mutate", _valid(), "text/plain", 415, "Content-Type must be application/json"),
    ("empty-content-type", "POST", "/validate", _valid(), None, 415, "Content-Type must be application/json"),
    ("array", "POST", "/mutate", b"[1, 2]", "application/json", 400, "must be a JSON object"),
    (
        "v1beta1",
        "POST",
        "/mutate",
        _edit(lambda d: d.update(apiVersion="admission.k8s.io/v1beta1")),
        "application/json",
        400,
        "expected apiVersion admission.k8s.io/v1",
    ),
    ("wrong-kind", "POST", "/validate", _edit(lambda d: d.update(kind="Pod")), "application/json", 400, "kind"),
    ("no-request", "POST", "/mutate", _edit(lambda d: d.pop("request")), "application/json", 400, "request is missing"),
    ("no-uid", "POST", "/mutate", _edit(lambda d: d["request"].pop("uid")), "application/json", 400, "request.uid"),
    (
        "no-object",
        "POST",
        "/validate",
        _edit(lambda d: d["request"].pop("object")),
        "application/json",
        400,
        "request.object is required",
    ),
    (
        "bad-operation",
        "POST",
        "/mutate",
        _edit(lambda d: d["request"].update(operation="PATCH")),
        "application/json",
        400,
        "request.operation",
    ),
    (
        "too-large",
        "POST",
        "/mutate",
        b"{" + b" " * (3 * 1024 * 1024) + b"}",
        "application/json",
        413,
        "larger than 3145728 bytes",
    ),
    (
        "deeply-nested",
        "POST",
        "/validate",
        b"[" * 2_000 + b"]" * 2_000,  # past orjson's 1024 levels (a bigger one is refused by structure count)
        "application/json",
        400,
        "nested too deeply",
    ),
    ("unknown-path", "POST", "/admit", _valid(), "application/json", 404, ""),
    ("root", "GET", "/", None, None, 404, ""),
    ("get-mutate", "GET", "/mutate", None, None, 405, ""),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "ctype", "status", "fragment"),
    [case[1:] for case in MALFORMED],
    ids=[case[0] for case in MALFORMED],
)
def test_malformed_input_gets_a_json_4xx(
    client: ApiserverClient, method: str, path: str, body: bytes | None, ctype: str | None, status: int, fragment: str
):
    headers = {"Content-Type": ctype} if ctype else {}
    if body is not None and not ctype:
        headers["Content-Type"] = ""
    got, resp, data = client.request(method, path, body, headers)
    assert got == status
    assert resp.getheader("Content-Type") == "application/json"
    doc = orjson.loads(data)
    assert doc["code"] == status and isinstance(doc["error"], str)
    assert fragment in doc["message"]


def test_a_pathologically_deep_object_still_gets_an_answer(client: ApiserverClient):
    status, _, data = client.request("POST", "/validate?timeout=10s", _deep_object())
    assert status == 200
    assert orjson.loads(data)["response"]["uid"]


def test_healthy_after_malformed_input(client: ApiserverClient, server: ServerProcess):
    status, body = client.get_json("/healthz")
    assert (status, body) == (200, {"status": "ok"})
    _, _, validated = admit(client, objects.inference_pod(), objects.SERVING_NS)
    assert validated["allowed"] is True
    booted = [r for r in server.log_records() if r.get("msg", "").startswith("Booting worker")]
    assert len(booted) == 2, "no worker died and was replaced"
    assert server.metric("gpu_admission_bad_requests_total", code="400") >= 8


# --- TLS and the metrics port --------------------------------------------------------------------


def test_tls_only_and_at_least_tls12(server: ServerProcess, server_certs):
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        body = _valid()
        raw.sendall(
            b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        try:
            answer = raw.recv(65536)
        except ConnectionResetError:
            answer = b""
    assert b"AdmissionReview" not in answer and not answer.startswith(b"HTTP/1.1 200"), "no plaintext admission"

    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        ctx = client_context([server_certs.ca_cert], minimum_version=version, maximum_version=version)
        with (
            socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname="gpu-admission.gpu-admission.svc") as tls,
        ):
            assert tls.version() == {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]


def test_the_certificate_is_checked_against_the_service_name(server: ServerProcess, server_certs):
    wrong = ApiserverClient(server.port, [server_certs.ca_cert], server_name="gpu-admission.other.svc")
    with pytest.raises(ssl.SSLCertVerificationError):
        wrong.get_json("/healthz")
    wrong.close()


def test_metrics_are_served_in_plain_http_by_the_master(server: ServerProcess, client: ApiserverClient, server_certs):
    admit(client, objects.qwen_job(min_available=4), objects.TRAINING_NS)
    denied = {"endpoint": "validate", "decision": "denied", "kind": "VolcanoJob", "dry_run": "false"}
    assert server.wait_metric("gpu_admission_requests_total", 1, **denied) >= 1
    assert server.wait_metric("gpu_admission_requests_total", 1, endpoint="mutate", decision="patched", kind="Pod") >= 1
    text = server.metrics()
    assert server.metric("gpu_admission_rule_violations_total", rule="gang-incomplete", action="deny") >= 1
    assert 'gpu_admission_request_duration_seconds_bucket{endpoint="mutate",le="0.0005"}' in text
    from cryptography import x509

    not_after = x509.load_pem_x509_certificate(server_certs.cert.read_bytes()).not_valid_after_utc.timestamp()
    assert server.metric("gpu_admission_cert_expiry_timestamp_seconds") == pytest.approx(not_after)
    assert server.metric("gpu_admission_policy_reload_error") == 0
    assert server.metric("gpu_admission_policy_loaded_timestamp_seconds") > 1.7e9


def test_readyz_says_ready_and_no_more(client: ApiserverClient, server: ServerProcess, namespaces_file: Path):
    status, _, data = client.request("GET", "/readyz")
    assert status == 200 and orjson.loads(data) == {"ready": True}
    for secret in (load_policy(POLICIES).digest, str(POLICIES), "failure", str(namespaces_file), "pid"):
        assert secret.encode() not in data, secret
    said = [r for r in server.log_records() if r.get("msg") == "ready"]  # the detail is in the log
    assert said and said[0]["policy"]["digest"] == load_policy(POLICIES).digest
    assert said[0]["tls"]["status"] == "ok" and said[0]["namespaces"]["file"] == str(namespaces_file)


# --- privileged-gpu through the real server ----------------------------------------------------------------


def test_kubectl_debug_adds_a_privileged_ephemeral_container_to_a_mig_pod(client: ApiserverClient):
    """``kubectl debug`` goes through the pods/ephemeralcontainers subresource: an UPDATE whose object is
    the whole stored Pod with one more container. The stored MIG pod is admitted; the debug container
    that would see every tenant's slice is denied, at the path of its trigger."""
    pod = stored(client, objects.inference_pod(), namespace=objects.SERVING_NS)
    sent = review(pod, namespace=objects.SERVING_NS)
    _, doc = client.post_review("validate", sent)
    assert check_response(doc, sent, "validate")["allowed"] is True
    debugged = copy.deepcopy(pod)
    debugged["spec"]["ephemeralContainers"] = [
        {"name": "debugger-x7k2p", "image": "busybox:1.36", "targetContainerName": "main",
         "securityContext": {"privileged": True}}
    ]  # fmt: skip
    sent = review(debugged, namespace=objects.SERVING_NS, operation="UPDATE", old=pod)
    sent["request"]["subResource"] = "ephemeralcontainers"
    _, doc = client.post_review("validate", sent)
    response = check_response(doc, sent, "validate")
    assert response["allowed"] is False and response["status"]["code"] == 403
    message = response["status"]["message"]
    assert message.startswith("[privileged-gpu] ephemeral container 'debugger-x7k2p' is privileged"), message
    assert message.endswith("(spec.ephemeralContainers[0].securityContext.privileged)"), message


def test_a_cpu_only_privileged_pod_is_denied_only_where_it_can_reach_sliced_cards(client: ApiserverClient):
    def cpu_pod(**spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent"},
            "spec": {"containers": [{"name": "agent", "image": "agent:1", "securityContext": {"privileged": True}}],
                     **spec},
        }  # fmt: skip

    sent = review(cpu_pod(tolerations=[{"operator": "Exists"}]), namespace=objects.SERVING_NS)
    _, doc = client.post_review("validate", sent)
    response = check_response(doc, sent, "validate")
    assert response["allowed"] is False
    assert response["status"]["message"].startswith("[privileged-gpu] container 'agent' is privileged in a pod"), (
        response["status"]["message"]
    )
    sent = review(cpu_pod(), namespace=objects.SERVING_NS)  # tolerates no GPU taint: not ours to judge
    _, doc = client.post_review("validate", sent)
    assert check_response(doc, sent, "validate") == {"uid": sent["request"]["uid"], "allowed": True}


def test_a_cpu_pod_that_gains_a_gpu_pools_reach_by_update_is_denied_through_the_rendered_conditions(
    client: ApiserverClient,
):
    """Issue 41 item 1 through the live server, as the apiserver would route it: the rendered
    matchConditions (emulated with cel-python) decide whether each review is sent at all. The CUDA pod
    created with no toleration is sent to neither webhook; the UPDATE that gives it a sliced pool's
    toleration and (gated) selector is sent to /validate and denied, saying to re-create the pod; a
    relabelling UPDATE is not sent."""
    from tests.deploy.cel_match import CALL, SKIP, Webhook
    from webhook.render import render

    docs = render(load_policy(POLICIES))
    hooks = {d["kind"]: Webhook(d["webhooks"][0]) for d in docs if d["kind"].endswith("WebhookConfiguration")}
    mutating, validating = hooks["MutatingWebhookConfiguration"], hooks["ValidatingWebhookConfiguration"]
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cuda", "namespace": objects.SERVING_NS},
        "spec": {"schedulingGates": [{"name": "example.com/hold"}],
                 "containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}]},
    }  # fmt: skip
    assert mutating.decide(pod) == SKIP and validating.decide(pod) == SKIP, "stored unjudged, as before"
    reached = copy.deepcopy(pod)
    reached["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    reached["spec"]["nodeSelector"] = {"workload": "gpu-dev"}
    assert validating.decide(reached, operation="UPDATE", old=pod) == CALL
    sent = review(reached, namespace=objects.SERVING_NS, operation="UPDATE", old=pod)
    _, doc = client.post_review("validate", sent)
    response = check_response(doc, sent, "validate")
    assert response["allowed"] is False and response["status"]["code"] == 403
    message = response["status"]["message"]
    assert message.startswith("[privileged-gpu] container 'main' holds no GPU"), message
    assert "re-create the pod" in message and "dev-cgpu" in message, message
    relabelled = copy.deepcopy(pod)
    relabelled["metadata"]["labels"] = {"team": "b"}
    assert validating.decide(relabelled, operation="UPDATE", old=pod) == SKIP
