"""The Flask app in process (no gunicorn): failure policy, dry run, skipped operations, readiness,
metrics. The engine and the policy are the real ones; where a test needs the engine to fail, it
injects engine entries that raise, through the ``Admitter`` seam made for that."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
from prometheus_client import REGISTRY

from tests.conftest import POLICIES
from tests.server import objects
from tests.server.support import check_response, patch_ops, review
from webhook.engine import Request, Stage, report
from webhook.server.app import create_app
from webhook.server.namespace_watch import NamespaceWatchCache
from webhook.server.namespaces import StaticNamespaces
from webhook.server.reload import PolicyStore
from webhook.server.runtime import Runtime


def _policy_dir(tmp_path: Path, failure: str) -> Path:
    text = (POLICIES / "default.yaml").read_text()
    assert "failure: allow" in text
    (tmp_path / "default.yaml").write_text(text.replace("failure: allow", f"failure: {failure}"))
    return tmp_path


def _client(store: PolicyStore, **runtime: Any):
    rt = Runtime(store=store, **runtime)
    return rt, create_app(rt).test_client()


def _post(client, endpoint: str, sent: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    resp = client.post(f"/{endpoint}?timeout=10s", data=orjson.dumps(sent), content_type="application/json")
    return resp.status_code, resp.get_json()


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _boom(*args: Any, **kwargs: Any):
    raise ZeroDivisionError("a bug in a rule")


@pytest.fixture(scope="module")
def store() -> PolicyStore:
    return PolicyStore.load(POLICIES)


def test_engine_error_with_failure_allow_admits_at_mutate_and_denies_at_validate(store, caplog):
    rt, client = _client(store)
    rt.admitter.entries = dict.fromkeys(("mutate", "validate"), _boom)
    before = _sample("gpu_admission_engine_errors_total", endpoint="validate", failure="deny")
    sent = review(objects.inference_pod(), namespace="ml")
    with caplog.at_level(logging.ERROR, logger="gpu_admission.server"):
        status, doc = _post(client, "validate", sent)
    assert status == 200
    response = check_response(doc, sent, "validate")
    assert response["allowed"] is False, "/validate never admits what it did not judge"
    assert response["status"]["message"].startswith(
        "[engine-error] gpu-admission could not evaluate this object (ZeroDivisionError) and an object that was "
        "not judged is never admitted"
    )
    assert _sample("gpu_admission_engine_errors_total", endpoint="validate", failure="deny") == before + 1
    logged = [r for r in caplog.records if r.getMessage().startswith("engine error")]
    assert logged and logged[0].exc_info is not None, "the traceback goes to the log, not to the user"

    status, doc = _post(client, "mutate", sent)
    response = check_response(doc, sent, "mutate")
    assert status == 200 and response == {"uid": sent["request"]["uid"], "allowed": True}


def test_engine_error_with_failure_deny_denies_with_the_uid(tmp_path):
    rt, client = _client(PolicyStore.load(_policy_dir(tmp_path, "deny")))
    rt.admitter.entries = dict.fromkeys(("mutate", "validate"), _boom)
    for endpoint in ("mutate", "validate"):
        sent = review(objects.inference_pod(), namespace="ml")
        status, doc = _post(client, endpoint, sent)
        response = check_response(doc, sent, endpoint)
        assert status == 200 and response["allowed"] is False
        message = response["status"]["message"]
        assert message.startswith("[engine-error] gpu-admission could not evaluate this object (ZeroDivisionError)")
        assert sent["request"]["uid"] in message


def test_recursion_in_the_engine_is_an_engine_error_too(store):
    rt, client = _client(store)

    def deep(*args: Any, **kwargs: Any):
        return deep(*args, **kwargs)

    rt.admitter.entries = dict.fromkeys(("mutate", "validate"), deep)
    sent = review(objects.inference_pod(), namespace="ml")
    status, doc = _post(client, "validate", sent)
    assert status == 200 and check_response(doc, sent, "validate")["allowed"] is False
    assert "(RecursionError)" in doc["response"]["status"]["message"]


def test_delete_and_connect_are_allowed_without_asking_the_engine(tmp_path):
    rt, client = _client(PolicyStore.load(_policy_dir(tmp_path, "deny")))
    rt.admitter.entries = dict.fromkeys(("mutate", "validate"), _boom)  # would deny, were it called
    for operation in ("DELETE", "CONNECT"):
        sent = review(None, operation=operation, old=objects.node_name_pod())
        for endpoint in ("mutate", "validate"):
            status, doc = _post(client, endpoint, sent)
            assert status == 200
            assert check_response(doc, sent, endpoint) == {"uid": sent["request"]["uid"], "allowed": True}


def test_update_is_validated_but_never_mutated(store):
    _, client = _client(
        store, namespaces=StaticNamespaces({objects.TRAINING_NS: {"gpu-admission.io/tier": "training"}})
    )
    old = objects.qwen_job(8)
    new = objects.qwen_job(4)
    sent = review(new, namespace=objects.TRAINING_NS, operation="UPDATE", old=old)
    status, doc = _post(client, "mutate", sent)
    assert status == 200 and "patch" not in check_response(doc, sent, "mutate")
    status, doc = _post(client, "validate", sent)
    response = check_response(doc, sent, "validate")
    assert response["allowed"] is False
    assert response["status"]["message"].startswith("[gang-incomplete]")


def test_dry_run_gets_the_same_decision_and_is_counted_apart(store):
    _, client = _client(store)
    pod = objects.node_name_pod()
    labels = {"endpoint": "validate", "decision": "denied", "kind": "Pod"}
    violation = {"rule": "node-name-set", "action": "deny", "kind": "Pod"}
    dry_before = _sample("gpu_admission_requests_total", dry_run="true", **labels)
    wet_before = _sample("gpu_admission_requests_total", dry_run="false", **labels)
    violations_before = _sample("gpu_admission_rule_violations_total", **violation)

    dry = review(pod, dry_run=True)
    _, dry_doc = _post(client, "validate", dry)
    wet = review(pod)
    _, wet_doc = _post(client, "validate", wet)

    assert dry_doc["response"]["allowed"] is False
    assert dry_doc["response"]["status"] == wet_doc["response"]["status"]
    assert _sample("gpu_admission_requests_total", dry_run="true", **labels) == dry_before + 1
    assert _sample("gpu_admission_requests_total", dry_run="false", **labels) == wet_before + 1
    assert _sample("gpu_admission_rule_violations_total", **violation) == violations_before + 1


def test_irrelevant_objects_pass_untouched(store):
    _, client = _client(store)
    sent = review(objects.plain_pod())
    for endpoint in ("mutate", "validate"):
        status, doc = _post(client, endpoint, sent)
        assert status == 200
        assert check_response(doc, sent, endpoint) == {"uid": sent["request"]["uid"], "allowed": True}


def test_kind_label_is_bounded(store):
    _, client = _client(store)
    odd = {"apiVersion": "example.com/v1", "kind": "K" * 50, "metadata": {"name": "x"}}
    before = _sample(
        "gpu_admission_requests_total", endpoint="validate", decision="ignored", kind="other", dry_run="false"
    )
    _post(client, "validate", review(odd))
    after = _sample(
        "gpu_admission_requests_total", endpoint="validate", decision="ignored", kind="other", dry_run="false"
    )
    assert after == before + 1


def test_mutate_uses_request_namespace_for_pods_without_one(store):
    """Pods created by controllers have no metadata.namespace; the namespace's labels must still apply."""
    _, client = _client(store, namespaces=StaticNamespaces({"serving": {"gpu-admission.io/tier": "serving"}}))
    job = objects.training_vcjob()
    assert "namespace" not in job["metadata"]
    status, doc = _post(client, "mutate", review(job, namespace="research"))
    assert status == 200 and patch_ops(doc["response"]), "an unlabelled namespace may train"
    _, doc = _post(client, "validate", review(job, namespace="serving"))  # restricted through the labels
    assert doc["response"]["status"]["message"].startswith("[class-not-allowed]")


def test_the_response_matches_the_engine_exactly(store):
    _, client = _client(store)
    pod = objects.node_name_pod()
    decision = report(
        store.policy, Request(pod, operation="CREATE", namespace="ml", stage=Stage.STORED)
    )  # /validate's view
    _, doc = _post(client, "validate", review(pod, namespace="ml"))
    assert doc["response"]["status"]["message"] == decision.message
    assert doc["response"].get("warnings", []) == list(decision.warnings)


def test_readyz_waits_for_the_namespace_cache(store):
    cache = NamespaceWatchCache(lambda: None)  # never started: not synced
    _, client = _client(store, namespaces=cache)
    resp = client.get("/readyz")
    assert resp.status_code == 503
    assert resp.get_json() == {"ready": False, "reasons": ["namespace labels not synced yet"]}
    assert client.get("/healthz").status_code == 200, "liveness does not depend on the cache"


def test_readyz_says_ready_and_nothing_about_the_policy(tmp_path, caplog):
    """Anyone who reaches the port can read /readyz: no directory, digest or failure mode there.
    A broken policy file does not make the pod unready; the log says where it is broken."""
    policy = _policy_dir(tmp_path, "allow")
    store = PolicyStore.load(policy)
    _, client = _client(store)
    resp = client.get("/readyz")
    assert resp.status_code == 200 and resp.get_json() == {"ready": True}
    (policy / "default.yaml").write_text((policy / "default.yaml").read_text().replace("maxGPUs: 2", "maxGPUs: two"))
    with caplog.at_level("WARNING", logger="gpu_admission.server"):
        store.check()
    resp = client.get("/readyz")
    assert resp.status_code == 200 and resp.get_json() == {"ready": True}
    for text in (str(policy), store.policy.digest, "allow", "stale"):
        assert text not in resp.get_data(as_text=True)
    logged = [r for r in caplog.records if r.getMessage().startswith("policy reload failed")]
    assert logged and any(f"{policy / 'default.yaml'}:" in e and "maxGPUs" in e for e in logged[0].fields["errors"])


def test_validate_judges_the_object_the_apiserver_will_store(store):
    """/validate gets the final object; if our mutation never reached it (the mutating webhook's
    failurePolicy is Ignore), what gets stored is what is judged, not what we would have made of it."""
    _, client = _client(store, namespaces=StaticNamespaces({objects.SERVING_NS: {"gpu-admission.io/tier": "serving"}}))
    pod = objects.inference_pod()
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-1g.12gb"] = "1"  # not on an A100-40GB
    sent = review(pod, namespace=objects.SERVING_NS)
    status, doc = _post(client, "mutate", sent)
    assert status == 200
    ops = patch_ops(check_response(doc, sent, "mutate"))
    assert {"op": "remove", "path": "/spec/containers/0/resources/limits/nvidia.com~1mig-1g.12gb"} in ops

    status, doc = _post(client, "validate", sent)  # as if the mutating call had failed open
    assert status == 200
    response = check_response(doc, sent, "validate")
    assert response["allowed"] is False
    assert response["status"]["message"].startswith("[mig-profile-unavailable]")

    final = review(jsonpatch.apply_patch(pod, ops), namespace=objects.SERVING_NS)
    status, doc = _post(client, "validate", final)  # what the apiserver sends after our mutation
    assert status == 200 and check_response(doc, final, "validate")["allowed"] is True


@pytest.mark.parametrize("failure", ["allow", "deny"])
def test_engine_deadline_mutate_follows_failure_validate_denies(tmp_path, failure: str):
    """Past the engine deadline (here: a nanosecond, so the real engine stops after its first step)
    /mutate answers as settings.failure says and /validate denies with engine-error, instead of the
    apiserver timing out and applying failurePolicy on its own."""
    store = PolicyStore.load(_policy_dir(tmp_path, failure))
    serving = StaticNamespaces({objects.SERVING_NS: {"gpu-admission.io/tier": "serving"}})
    _, client = _client(store, namespaces=serving, engine_deadline=1e-9)
    sent = review(objects.inference_pod(), namespace=objects.SERVING_NS)
    status, doc = _post(client, "mutate", sent)
    response = check_response(doc, sent, "mutate")
    assert status == 200 and "patch" not in response
    assert response["allowed"] is (failure == "allow")
    status, doc = _post(client, "validate", sent)
    response = check_response(doc, sent, "validate")
    assert status == 200 and response["allowed"] is False
    message = response["status"]["message"]
    assert message.startswith("[engine-error]") and "no decision within 1e-09s, at shape check" in message
