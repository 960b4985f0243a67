"""A namespace the cache does not know is looked up, then denied: never judged by the catch-all entitlement.

The attack: with the shipped policy, a namespace labelled ``gpu-admission.io/tier: serving`` may not
train, while an unlabelled one may (the catch-all ``everyone-else``). A namespace the watch has not
delivered yet, judged "as if unlabelled", would get training whatever its labels say. The server now
reads such a namespace with one GET (the real ``kubernetes`` client against ``fake_apiserver``, which
answers ``GET /api/v1/namespaces/NAME`` as the apiserver does, 404 ``NotFound`` included) and, when it
stays unknown, ``/validate`` denies and ``/mutate`` does not mutate.

``fake.change_silently`` creates a namespace with its history compacted: the open watch never sees it,
exactly the window (a namespace created after the cache synced, not yet delivered) the GET covers.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server import objects
from tests.server.fake_apiserver import FakeNamespaceAPI
from tests.server.support import (
    ServerProcess,
    check_response,
    eventually,
    kube_api,
    patch_ops,
    review,
    serve_args,
    stored,
)
from webhook.server.namespace_watch import NamespaceWatchCache
from webhook.server.namespaces import NamespaceUnknown, OfflineNamespaces, StaticNamespaces

SERVING = {"gpu-admission.io/tier": "serving"}
UNKNOWN = "unknown, retry"


@pytest.fixture
def fake() -> Iterator[FakeNamespaceAPI]:
    api = FakeNamespaceAPI({"default": {}, "serving-team": SERVING}).start()
    yield api
    api.stop()


@pytest.fixture
def cache(fake: FakeNamespaceAPI) -> Iterator[NamespaceWatchCache]:
    made = NamespaceWatchCache(lambda: kube_api(fake.url), miss_wait=0.05, backoff_initial=0.02, backoff_max=0.1)
    made.start()
    assert made.wait_synced(30)
    eventually(lambda: len(fake.watches()) == 1, what="the watch")
    yield made
    made.stop()


# --- the cache's lookup, with the real client ------------------------------------------------------


def test_a_cached_namespace_needs_no_get(fake, cache):
    assert cache.lookup("serving-team")["gpu-admission.io/tier"] == "serving"
    assert fake.gets() == []


def test_a_namespace_the_watch_has_not_delivered_is_read_with_one_get(fake, cache):
    fake.change_silently("late-team", SERVING)
    assert cache.labels("late-team") is None  # the watch never delivered it
    assert cache.lookup("late-team") == {"kubernetes.io/metadata.name": "late-team", **SERVING}
    assert fake.gets() == ["late-team"]
    assert cache.labels("late-team") is None  # the GET is not cached: the watch owns the cache


def test_a_namespace_that_does_not_exist_is_unknown(fake, cache):
    with pytest.raises(NamespaceUnknown) as info:
        cache.lookup("ghost")
    assert info.value.namespace == "ghost" and info.value.reason == "not found (404)"
    assert fake.gets() == ["ghost"]


def test_an_apiserver_error_leaves_the_namespace_unknown(fake, cache):
    fake.change_silently("late-team", SERVING)
    fake.fail_gets = 1
    with pytest.raises(NamespaceUnknown) as info:
        cache.lookup("late-team")
    assert "503" in info.value.reason
    assert cache.lookup("late-team")["gpu-admission.io/tier"] == "serving"  # the next review finds it


def test_an_apiserver_that_never_answers_is_unknown_within_the_budget():
    """A peer that accepts the connection and says nothing: the GET gives up after ``lookup_timeout``."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    made = NamespaceWatchCache(lambda: kube_api(url), lookup_timeout=0.3, miss_wait=0.0)
    try:
        started = time.monotonic()
        with pytest.raises(NamespaceUnknown):
            made.lookup("anything")
        assert time.monotonic() - started < 5.0  # bounded by the budget, not by a default 60 s socket timeout
    finally:
        silent.close()


def test_offline_sources_have_no_facts_and_keep_the_name_label_only():
    """``--namespaces none`` and a file are the platform's word, not the cluster's: no lookup, no denial."""
    assert OfflineNamespaces().lookup("anything") is None
    assert StaticNamespaces({"a": SERVING}).lookup("b") is None
    assert StaticNamespaces({"a": SERVING}).lookup("a") == SERVING


# --- through the real server ---------------------------------------------------------------------


def _kubeconfig(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: fake, cluster: {{server: '{url}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: fake, user: u}}]\ncurrent-context: c\n"
    )
    return path


def _validate(client, obj: dict, namespace: str) -> dict:
    sent = review(obj, namespace=namespace)
    status, doc = client.post_review("validate", sent)
    assert status == 200
    return check_response(doc, sent, "validate")


def test_unknown_namespaces_in_a_gunicorn_worker(tmp_path: Path, server_certs):
    fake = FakeNamespaceAPI({"research": {}, "serving-team": SERVING}).start()
    server = ServerProcess(
        tmp_path,
        serve_args(
            server_certs,
            "--namespaces",
            "cluster",
            "--kubeconfig",
            str(_kubeconfig(tmp_path, fake.url)),
            "--workers",
            "1",
            "--threads",
            "2",
        ),
        ca_files=[server_certs.ca_cert],
    )
    server.start(wait_ready=False)
    stopped = False
    try:
        client = server.client()
        eventually(lambda: _ready(client), timeout=60, what="readiness after the first list")
        eventually(lambda: len(fake.watches()) >= 1, what="the watch")
        job = objects.training_vcjob()

        # control: a known unlabelled namespace trains (the catch-all entitlement, rightly)
        assert _validate(client, stored(client, job, "research"), "research")["allowed"] is True

        # created after the cache synced, never delivered by the watch: the GET finds it and its labels
        # decide (serving-only: no training), not the catch-all
        fake.change_silently("late-serving", SERVING)
        answer = _validate(client, stored(client, job, "late-serving"), "late-serving")
        assert answer["allowed"] is False
        message = answer["status"]["message"]
        assert "[class-not-allowed]" in message and UNKNOWN not in message, message
        assert "late-serving" in fake.gets()
        fake.change_silently("late-plain", {})
        assert _validate(client, stored(client, job, "late-plain"), "late-plain")["allowed"] is True

        # never exists: /mutate leaves it alone, /validate denies and says to retry
        sent = review(job, namespace="ghost")
        status, doc = client.post_review("mutate", sent)
        mutated = check_response(doc, sent, "mutate")
        assert status == 200 and mutated["allowed"] is True and patch_ops(mutated) == []
        answer = _validate(client, job, "ghost")
        assert answer["allowed"] is False and answer["status"]["code"] == 403
        message = answer["status"]["message"]
        assert message.startswith(f"[class-not-allowed] namespace ghost {UNKNOWN}"), message
        assert message.endswith("(metadata.namespace)")
        # a pod with no GPU in it is none of the webhook's business, known namespace or not
        assert _validate(client, objects.plain_pod(), "ghost")["allowed"] is True
        # an UPDATE is denied too (the old object shares the finding, which must not cancel it)
        answer = _validate_update(client, job, "ghost")
        assert answer["allowed"] is False and UNKNOWN in answer["status"]["message"]
        assert server.metric("gpu_admission_namespace_lookups_total", result="not-found") >= 1

        # the apiserver goes away: cached namespaces keep their labels, unknown ones are denied
        fake.stop()
        stopped = True
        assert _validate(client, stored(client, job, "research"), "research")["allowed"] is True
        answer = _validate(client, job, "created-during-the-outage")
        assert answer["allowed"] is False and UNKNOWN in answer["status"]["message"]
        server.wait_metric("gpu_admission_namespace_lookups_total", 1, result="error")
        client.close()
    finally:
        assert server.stop() == 0
        if not stopped:
            fake.stop()
    lines = [d for d in server.decisions() if d.get("namespace") == "ghost" and d["endpoint"] == "validate"]
    assert lines and all(d["rules"] == ["class-not-allowed"] for d in lines if not d["allowed"])


def _validate_update(client, obj: dict, namespace: str) -> dict:
    changed = objects.copy_of(obj)
    changed["metadata"].setdefault("labels", {})["team"] = "b"
    sent = review(changed, namespace=namespace, operation="UPDATE", old=obj)
    status, doc = client.post_review("validate", sent)
    assert status == 200
    return check_response(doc, sent, "validate")


def _ready(client) -> bool:
    try:
        return client.get_json("/readyz")[0] == 200
    except OSError:
        client.close()
        return False


