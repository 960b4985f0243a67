"""``/validate`` never admits what it did not judge, through the real server (gunicorn, TLS, 2 workers).

The fault is injected from outside the product: a ``sitecustomize`` module on the server's
``PYTHONPATH`` wraps the engine's ``mutate`` and ``validate`` entries before the server imports them, and
raises for objects that carry the annotation ``FAULT``. Everything else (policy, namespaces, engine, HTTP, TLS) is real.
The shipped policy's ``settings.failure`` is ``allow``: ``/mutate`` follows it, ``/validate`` does not.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import POLICIES
from tests.server import objects
from tests.server.support import ServerProcess, check_response, review, serve_args

pytestmark = pytest.mark.server

FAULT = "fault-injection.test/raise"
SITECUSTOMIZE = f'''
import webhook.engine


def _faulty(real):
    def entry(policy, request):
        meta = request.obj.get("metadata") if isinstance(request.obj, dict) else None
        if isinstance(meta, dict) and {FAULT!r} in (meta.get("annotations") or {{}}):
            raise ZeroDivisionError("injected by the test")
        return real(policy, request)

    return entry


webhook.engine.mutate = _faulty(webhook.engine.mutate)
webhook.engine.validate = _faulty(webhook.engine.validate)
'''


def _server(tmp: Path, certs, failure: str, namespaces_file: Path) -> ServerProcess:
    inject = tmp / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SITECUSTOMIZE)
    policy = tmp / "policy"
    policy.mkdir()
    text = (POLICIES / "default.yaml").read_text()
    assert "failure: allow" in text
    (policy / "default.yaml").write_text(text.replace("failure: allow", f"failure: {failure}"))
    return ServerProcess(
        tmp,
        serve_args(certs, "--namespace-labels", str(namespaces_file), "--workers", "2", policy=policy),
        ca_files=[certs.ca_cert],
        env={"PYTHONPATH": str(inject)},
    )


@pytest.fixture(scope="module", params=["allow", "deny"])
def server(request, tmp_path_factory, server_certs, namespaces_file) -> Iterator[ServerProcess]:
    proc = _server(tmp_path_factory.mktemp(f"fail-{request.param}"), server_certs, request.param, namespaces_file)
    proc.failure = request.param  # type: ignore[attr-defined]
    proc.start()
    yield proc
    assert proc.stop() == 0, proc.output()[-3000:]


def _attack() -> dict:
    """Privileged, not entitled to training in ``serving``, bound by hand: every rule would deny it."""
    pod = objects.inference_pod()
    pod["metadata"]["labels"]["gpu-admission.io/workload"] = "training"
    pod["metadata"]["annotations"][FAULT] = "1"
    pod["spec"]["nodeName"] = "gpu-node-1"
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    return pod


def test_an_engine_exception_at_validate_is_denied_whatever_failure_says(server):
    client = server.client()
    try:
        sent = review(_attack(), namespace=objects.SERVING_NS)
        status, doc = client.post_review("validate", sent)
    finally:
        client.close()
    assert status == 200
    response = check_response(doc, sent, "validate")
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert message.startswith("[engine-error] gpu-admission could not evaluate this object (ZeroDivisionError)")
    assert sent["request"]["uid"] in message
    assert server.wait_metric("gpu_admission_engine_errors_total", 1, endpoint="validate", failure="deny") >= 1
    (line,) = server.decisions(sent["request"]["uid"])
    assert line["decision"] == "error" and line["allowed"] is False and line["rules"] == ["engine-error"]


def test_an_engine_exception_at_mutate_follows_settings_failure(server):
    client = server.client()
    try:
        sent = review(_attack(), namespace=objects.SERVING_NS)
        status, doc = client.post_review("mutate", sent)
    finally:
        client.close()
    assert status == 200
    response = check_response(doc, sent, "mutate")
    if server.failure == "allow":
        assert response == {"uid": sent["request"]["uid"], "allowed": True}, "admitted unchanged, on to /validate"
    else:
        assert response["allowed"] is False
        assert "settings.failure is deny" in response["status"]["message"]


def test_the_superscript_pod_is_judged_and_denied(server):
    """The issue's attack with no injected fault: ``gpus: "²"`` once raised inside the engine."""
    pod = _attack()
    del pod["metadata"]["annotations"][FAULT]
    pod["metadata"]["annotations"]["gpu-admission.io/gpus"] = "²"
    client = server.client()
    try:
        sent = review(pod, namespace=objects.SERVING_NS)
        status, doc = client.post_review("validate", sent)
    finally:
        client.close()
    assert status == 200
    response = check_response(doc, sent, "validate")
    assert response["allowed"] is False
    assert "[intent-invalid]" in response["status"]["message"]
    assert "[engine-error]" not in response["status"]["message"]
