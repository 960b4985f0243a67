"""The namespace label cache, driven by the real ``kubernetes`` client against a local server that
speaks the apiserver's list/watch protocol (see ``fake_apiserver`` for what is emulated and the
documentation it follows): first list, watch events, a dropped watch resumed from the last
resourceVersion without a re-list, 410 Gone (as an ERROR event and as an HTTP status) answered by a
re-list, list errors retried, bookmarks; then the same cache inside a real gunicorn worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.server import objects
from tests.server.fake_apiserver import FakeNamespaceAPI
from tests.server.support import ServerProcess, check_response, eventually, kube_api, review, serve_args, stored
from webhook.server.namespace_watch import NamespaceWatchCache

TRAINING = {"gpu-admission.io/tier": "training"}


@pytest.fixture
def fake() -> Iterator[FakeNamespaceAPI]:
    api = FakeNamespaceAPI({"default": {}, "research": TRAINING}).start()
    yield api
    api.stop()


@pytest.fixture
def cache_for(fake: FakeNamespaceAPI) -> Iterator[Callable[..., NamespaceWatchCache]]:
    made: list[NamespaceWatchCache] = []

    def make(**options) -> NamespaceWatchCache:
        options = {"backoff_initial": 0.02, "backoff_max": 0.1, "watch_timeout": 30, **options}
        cache = NamespaceWatchCache(lambda: kube_api(fake.url), **options)
        made.append(cache)
        cache.start()
        return cache

    yield make
    for cache in made:
        cache.stop(timeout=2)


def test_first_list_then_watch_events(fake, cache_for):
    cache = cache_for()
    assert cache.wait_synced(30)
    assert cache.labels("research")["gpu-admission.io/tier"] == "training"
    assert cache.status()["resource_version"] == str(fake.rv)
    eventually(lambda: len(fake.watches()) == 1, what="the watch")
    watch = fake.watches()[0]
    assert watch["resourceVersion"] == str(fake.rv), "the watch starts where the list ended"
    assert watch["allowWatchBookmarks"].lower() == "true"

    fake.add("team-a", {"gpu-admission.io/tier": "serving"})
    eventually(lambda: cache.labels("team-a") is not None, what="ADDED")
    fake.modify("research", {"gpu-admission.io/tier": "serving"})
    eventually(lambda: cache.labels("research")["gpu-admission.io/tier"] == "serving", what="MODIFIED")
    rv = fake.delete("default")
    eventually(lambda: cache.status()["resource_version"] == str(rv), what="DELETED")
    assert cache.labels("default") is None
    assert len(fake.lists()) == 1


def test_a_dropped_watch_resumes_from_the_last_resource_version(fake, cache_for):
    cache = cache_for()
    assert cache.wait_synced(30)
    eventually(lambda: len(fake.watches()) == 1)
    last = fake.add("team-b", {})
    eventually(lambda: cache.status()["resource_version"] == str(last))
    fake.drop_watches()
    eventually(lambda: len(fake.watches()) == 2, what="a new watch")
    assert fake.watches()[1]["resourceVersion"] == str(last), "resume, do not start over"
    assert len(fake.lists()) == 1, "a dropped connection is not a reason to re-list"
    fake.add("team-c", TRAINING)
    eventually(lambda: cache.labels("team-c") == {"kubernetes.io/metadata.name": "team-c", **TRAINING})


def test_bookmarks_advance_the_resource_version(fake, cache_for):
    cache = cache_for()
    assert cache.wait_synced(30)
    eventually(lambda: len(fake.watches()) == 1)
    rv = fake.bookmark()
    eventually(lambda: cache.status()["resource_version"] == str(rv), what="the bookmark")
    fake.drop_watches()
    eventually(lambda: len(fake.watches()) == 2)
    assert fake.watches()[1]["resourceVersion"] == str(rv)


def test_410_gone_event_means_relist(fake, cache_for):
    cache = cache_for()
    assert cache.wait_synced(30)
    eventually(lambda: len(fake.watches()) == 1)
    # while the client is away, history is compacted: a namespace appears and another one vanishes
    fake.change_silently("ghost-team", TRAINING)
    fake.change_silently("default", None)
    fake.drop_watches()
    eventually(lambda: len(fake.lists()) == 2, what="the re-list after 410")
    eventually(lambda: cache.labels("ghost-team") is not None, what="state from the re-list")
    assert cache.labels("default") is None
    eventually(lambda: fake.watches()[-1]["resourceVersion"] == str(fake.rv), what="a watch from the new list")


def test_410_gone_http_status_means_relist(fake, cache_for):
    cache = cache_for()
    assert cache.wait_synced(30)
    eventually(lambda: len(fake.watches()) == 1)
    fake.gone_http_once = True
    fake.drop_watches()
    eventually(lambda: len(fake.lists()) == 2, what="the re-list after HTTP 410")
    assert cache.ready


def test_list_errors_are_retried_until_the_first_sync(fake, cache_for):
    fake.fail_lists = 2
    cache = cache_for()
    assert cache.wait_synced(30)
    assert len(fake.lists()) == 3
    assert cache.labels("research") is not None
    assert cache.status()["status"] == "ok"


def test_a_server_side_watch_timeout_rewatches_without_relist(fake, cache_for):
    cache = cache_for(watch_timeout=1)
    assert cache.wait_synced(30)
    eventually(lambda: len(fake.watches()) >= 2, timeout=30, what="a second watch after timeoutSeconds")
    assert fake.watches()[0]["timeoutSeconds"] == "1"
    assert len(fake.lists()) == 1


def test_a_namespace_the_watch_has_not_delivered_is_read_at_once(fake, cache_for):
    """No waiting for the watch in a request thread: ``labels`` answers from what it holds, and
    ``lookup`` goes straight to one GET (a namespace created a moment ago, its event on the way)."""
    cache = cache_for()
    assert cache.wait_synced(30)
    eventually(lambda: len(fake.watches()) == 1)
    fake.change_silently("just-created", TRAINING)  # exists, but the open watch never sees it
    assert cache.labels("just-created") is None
    assert cache.lookup("just-created")["gpu-admission.io/tier"] == "training"
    assert fake.gets() == ["just-created"]


# --- inside the real server ---------------------------------------------------------------------------


def test_cluster_mode_in_a_gunicorn_worker(tmp_path: Path, server_certs):
    """``serve --namespace-labels cluster``: /readyz waits for the first list, decisions follow the labels the
    watch delivers (a namespace losing its training tier loses the training class)."""
    fake = FakeNamespaceAPI({"research": TRAINING}).start()
    fake.fail_lists = 10**6  # the "apiserver" is unavailable at first
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: fake, cluster: {{server: '{fake.url}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: fake, user: u}}]\ncurrent-context: c\n"
    )
    server = ServerProcess(
        tmp_path,
        serve_args(
            server_certs,
            "--namespace-labels",
            "cluster",
            "--kubeconfig",
            str(kubeconfig),
            "--workers",
            "1",
            "--threads",
            "2",
        ),
        ca_files=[server_certs.ca_cert],
    )
    server.start(wait_ready=False)
    try:
        client = server.client()
        eventually(lambda: _readyz(client)[0] == 503, timeout=20, what="the server to answer /readyz")
        _, detail = _readyz(client)
        # the DRA caches may still be syncing too (this fake serves no resource.k8s.io: 404 = synced, empty)
        assert detail["ready"] is False and detail["reasons"][0] == "namespace labels not synced yet"
        assert set(detail["reasons"]) <= {
            "namespace labels not synced yet",
            "DRA claim templates and device classes not synced yet",
        }
        fake.fail_lists = 0
        eventually(lambda: _readyz(client)[0] == 200, timeout=60, what="readiness after the first list")
        assert server.metric("gpu_admission_namespace_cache_synced") == 1

        job = stored(client, objects.training_vcjob(), "research")  # as the apiserver stores it
        sent = review(job, namespace="research")
        _, doc = client.post_review("validate", sent)
        assert check_response(doc, sent, "validate")["allowed"] is True

        fake.modify("research", {"gpu-admission.io/tier": "serving"})  # serving-only: training is not granted

        def denied() -> bool:
            again = review(job, namespace="research")
            _, doc = client.post_review("validate", again)
            return doc["response"]["allowed"] is False

        eventually(denied, timeout=5, what="the label change to reach the decision")
        client.close()
    finally:
        assert server.stop() == 0
        fake.stop()


def _readyz(client) -> tuple[int, dict]:
    try:
        return client.get_json("/readyz")
    except OSError:
        client.close()
        return 0, {}
