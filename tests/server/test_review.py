"""The AdmissionReview v1 contract in isolation: what is accepted, what is refused, response shapes."""

from __future__ import annotations

import base64

import orjson
import pytest

from tests.server.support import review
from webhook.server.review import MAX_BODY_BYTES, ReviewError, allow, deny, parse_review

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}


def _body(doc: object) -> bytes:
    return orjson.dumps(doc)


def test_parses_what_the_apiserver_sends():
    sent = review(POD, namespace="ml", dry_run=True)
    got = parse_review(_body(sent))
    assert got.uid == sent["request"]["uid"]
    assert got.operation == "CREATE"
    assert got.namespace == "ml"
    assert got.obj == POD
    assert got.old_object is None
    assert got.dry_run is True


def test_cluster_scoped_and_empty_namespace_mean_none():
    assert parse_review(_body(review(POD, namespace=None))).namespace is None
    assert parse_review(_body(review(POD, namespace=""))).namespace is None


def test_delete_carries_no_object():
    got = parse_review(_body(review(None, operation="DELETE", old=POD)))
    assert got.obj is None and got.old_object == POD


def _mutated(change) -> bytes:
    doc = review(POD)
    change(doc)
    return _body(doc)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"", "not valid JSON"),
        (b"{", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
        (b"[]", "must be a JSON object"),
        (
            _mutated(lambda d: d.update(apiVersion="admission.k8s.io/v1beta1")),
            "expected apiVersion admission.k8s.io/v1",
        ),
        (_mutated(lambda d: d.update(kind="Pod")), "kind AdmissionReview"),
        (_mutated(lambda d: d.pop("request")), "request is missing"),
        (_mutated(lambda d: d["request"].pop("uid")), "request.uid"),
        (_mutated(lambda d: d["request"].update(uid=7)), "request.uid"),
        (_mutated(lambda d: d["request"].update(operation="PATCH")), "request.operation"),
        (_mutated(lambda d: d["request"].pop("object")), "request.object is required for CREATE"),
        (_mutated(lambda d: d["request"].update(object=[1])), "request.object is required for CREATE"),
        (_mutated(lambda d: d["request"].update(namespace=5)), "request.namespace"),
        (
            _mutated(lambda d: d["request"].update(operation="UPDATE", oldObject="x")),
            "request.oldObject must be an object",
        ),
    ],
)
def test_refuses_malformed_reviews_with_400(body: bytes, fragment: str):
    with pytest.raises(ReviewError) as err:
        parse_review(body)
    assert err.value.status == 400
    assert fragment in err.value.message


def test_error_messages_do_not_echo_large_client_values():
    body = _mutated(lambda d: d.update(kind="K" * 10_000))
    with pytest.raises(ReviewError) as err:
        parse_review(body)
    assert len(err.value.message) < 300


def test_allow_with_patch_is_base64_jsonpatch():
    sent = parse_review(_body(review(POD)))
    ops = [{"op": "add", "path": "/spec/replicas", "value": 3}]
    doc = allow(sent, patch=ops)
    assert doc["apiVersion"] == "admission.k8s.io/v1" and doc["kind"] == "AdmissionReview"
    assert doc["response"]["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(doc["response"]["patch"])) == ops


def test_allow_without_operations_has_neither_patch_nor_patch_type():
    doc = allow(parse_review(_body(review(POD))), patch=())
    assert doc["response"] == {"uid": doc["response"]["uid"], "allowed": True}


def test_deny_is_403_forbidden_with_the_message_and_keeps_warnings():
    sent = parse_review(_body(review(POD)))
    doc = deny(sent, "[node-name-set] nope (spec.nodeName)", warnings=["w"], audit={"k": "v"})
    assert doc["response"] == {
        "uid": sent.uid,
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": "[node-name-set] nope (spec.nodeName)"},
        "warnings": ["w"],
        "auditAnnotations": {"k": "v"},
    }


def test_body_limit_is_the_apiservers_3_mib():
    assert MAX_BODY_BYTES == 3 * 1024 * 1024


@pytest.mark.parametrize(
    ("user_info", "want"),
    [
        (
            {"username": "system:kube-scheduler", "groups": ["system:authenticated"]},
            ("system:kube-scheduler", ("system:authenticated",)),
        ),
        ({"username": "alice", "groups": ["a", 7, None]}, ("alice", ("a",))),  # non-strings dropped
        ({"username": 12, "groups": "admins"}, ("", ())),  # wrong types: nobody in particular
        ("alice", None),  # not an object: no requester
        (None, None),
    ],
)
def test_the_requester_is_read_from_user_info(user_info, want):
    sent = review({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
    sent["request"]["userInfo"] = user_info
    requester = parse_review(orjson.dumps(sent)).requester
    assert (None if requester is None else (requester.username, requester.groups)) == want
    if requester is not None:
        assert requester.is_scheduler == (want[0] == "system:kube-scheduler")
