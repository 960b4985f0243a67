"""The admission routes answered in front of Flask (``AdmissionRoutes``) answer exactly as Flask does.

The apiserver's calls (``POST``, ``Content-Type: application/json``, a plain ``Content-Length``) take
the direct path; the same request with ``application/json; charset=utf-8`` takes Flask's. Each case
sends the same body both ways and compares status line, headers that matter, body and the metrics
and log lines a rejected request leaves. The engine, policy and metrics are the real ones."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from tests.conftest import POLICIES
from tests.server import objects
from tests.server.support import check_response, review
from webhook.server.app import AdmissionRoutes, create_app
from webhook.server.reload import PolicyStore
from webhook.server.review import MAX_BODY_BYTES
from webhook.server.runtime import Runtime

DIRECT = "application/json"
VIA_FLASK = "application/json; charset=utf-8"  # what a client other than the apiserver may send


@pytest.fixture(scope="module")
def runtime() -> Runtime:
    return Runtime(store=PolicyStore.load(POLICIES))


@pytest.fixture
def client(runtime: Runtime):
    return create_app(runtime).test_client()


def _both(client, endpoint: str, data: bytes) -> list[Any]:
    return [
        client.post(f"/{endpoint}?timeout=10s", data=data, content_type=content_type)
        for content_type in (DIRECT, VIA_FLASK)
    ]


def _bad(endpoint: str, code: int) -> float:
    return REGISTRY.get_sample_value("gpu_admission_bad_requests_total", {"endpoint": endpoint, "code": str(code)}) or 0


def test_the_direct_path_is_taken_only_for_the_apiservers_own_shape(runtime):
    seen: list[str] = []
    app = create_app(runtime)
    routes = app.wsgi_app
    assert isinstance(routes, AdmissionRoutes)
    fallback = routes.fallback

    def spy(environ, start_response):
        seen.append(environ["PATH_INFO"])
        return fallback(environ, start_response)

    routes.fallback = spy
    test = app.test_client()
    body = orjson.dumps(review(objects.inference_pod(), namespace="ml"))
    assert test.post("/validate", data=body, content_type=DIRECT).status_code == 200
    assert seen == [], "the apiserver's call never reaches Flask"
    assert test.post("/validate", data=body, content_type=VIA_FLASK).status_code == 200
    assert test.get("/validate").status_code == 405
    assert test.post("/other", data=body, content_type=DIRECT).status_code == 404
    assert test.get("/healthz").status_code == 200
    assert seen == ["/validate", "/validate", "/other", "/healthz"]


@pytest.mark.parametrize(
    ("endpoint", "obj", "allowed"),
    [
        ("mutate", objects.training_vcjob(), True),  # with a patch
        ("validate", objects.plain_pod(), True),
        ("validate", objects.inference_pod(), False),  # placement-missing: never went through /mutate
        ("validate", objects.node_name_pod(), False),
        ("validate", objects.qwen_job(1), False),  # half a gang
    ],
)
def test_a_review_gets_the_same_answer_on_both_paths(client, endpoint, obj, allowed):
    sent = review(obj, namespace="ml")
    direct, flask = _both(client, endpoint, orjson.dumps(sent))
    assert direct.status == flask.status == "200 OK"
    assert direct.headers["Content-Type"] == flask.headers["Content-Type"] == "application/json"
    assert int(direct.headers["Content-Length"]) == len(direct.data)
    assert direct.get_json() == flask.get_json()
    response = check_response(direct.get_json(), sent, endpoint)
    assert ("patch" in response) == (endpoint == "mutate")
    assert response["allowed"] is allowed


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", "body is not valid JSON"),
        (b"", "body is not valid JSON"),
        (orjson.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}), "expected apiVersion"),
        (orjson.dumps([1, 2]), "an AdmissionReview must be a JSON object"),
    ],
)
def test_a_bad_review_is_the_same_400_counted_and_logged_on_both_paths(client, caplog, data, message):
    before = _bad("validate", 400)
    with caplog.at_level(logging.WARNING, logger="gpu_admission.server"):
        direct, flask = _both(client, "validate", data)
    assert direct.status == flask.status == "400 BAD REQUEST"
    assert direct.get_json() == flask.get_json()
    assert direct.get_json()["message"].startswith(message)
    assert _bad("validate", 400) == before + 2, "both paths count the rejection under the endpoint"
    lines = [r for r in caplog.records if r.getMessage() == "rejected request"]
    assert len(lines) == 2
    assert [line.fields["path"] for line in lines] == ["/validate", "/validate"]  # type: ignore[attr-defined]
    assert lines[0].fields == lines[1].fields  # type: ignore[attr-defined]


def test_an_unexpected_error_is_the_same_logged_json_500_on_both_paths(runtime, caplog):
    class Broken:
        def handle(self, endpoint: str, body: bytes) -> dict[str, Any]:
            raise RuntimeError("a bug outside the engine")

    app = create_app(runtime)
    app.wsgi_app.admitter = Broken()  # type: ignore[attr-defined]  # the direct path's admitter
    app.view_functions["validate"] = lambda: Broken().handle("validate", b"")  # Flask's view, the same bug
    with caplog.at_level(logging.ERROR, logger="gpu_admission.server"):
        direct, flask = _both(app.test_client(), "validate", b"{}")
    assert direct.status == flask.status == "500 INTERNAL SERVER ERROR"
    assert (
        direct.get_json()
        == flask.get_json()
        == {
            "code": 500,
            "error": "Internal Server Error",
            "message": "internal error (RuntimeError)",
        }
    )
    logged = [r for r in caplog.records if r.getMessage() == "unhandled error"]
    assert len(logged) == 2 and all(r.exc_info is not None for r in logged)


def test_an_oversized_body_still_gets_flasks_413(client):
    data = b"x" * (MAX_BODY_BYTES + 1)
    for content_type in (DIRECT, VIA_FLASK):
        resp = client.post("/validate", data=data, content_type=content_type)
        assert resp.status_code == 413
        assert "larger than" in resp.get_json()["message"]


@pytest.mark.parametrize("length", ["", "-1", "1e3", "٣", "0x10", "12345678901"])
def test_a_content_length_that_is_not_plain_digits_goes_to_flask(runtime, length):
    app = create_app(runtime)
    routes = app.wsgi_app
    reached: list[str] = []
    routes.fallback = lambda environ, start_response: reached.append(environ.get("CONTENT_LENGTH")) or []  # type: ignore[attr-defined]
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/validate", "CONTENT_TYPE": DIRECT, "CONTENT_LENGTH": length}
    assert list(routes(environ, lambda *a: None)) == []
    assert reached == [length]
