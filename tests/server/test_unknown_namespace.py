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

import gc
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server import objects
from tests.server.fake_apiserver import FakeNamespaceAPI
from tests.server.support import (
    check_response,
    cluster_server,
    eventually,
    kube_api,
    patch_ops,
    review,
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
    made = NamespaceWatchCache(lambda: kube_api(fake.url), backoff_initial=0.02, backoff_max=0.1)
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
    made = NamespaceWatchCache(lambda: kube_api(url), lookup_timeout=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(NamespaceUnknown):
            made.lookup("anything")
        assert time.monotonic() - started < 5.0  # bounded by the budget, not by a default 60 s socket timeout
    finally:
        silent.close()


def _lookup_in_thread(cache: NamespaceWatchCache, namespace: str, out: dict[str, object]) -> threading.Thread:
    def run() -> None:
        try:
            out[namespace] = cache.lookup(namespace)
        except NamespaceUnknown as exc:
            out[namespace] = exc.reason

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_lookups_at_once_are_capped_and_a_not_found_is_remembered(fake):
    """Forged reviews name namespaces that do not exist. With two GETs held by the apiserver, a
    third namespace is not looked up at all (unknown at once, no GET, no waiting for a slot); a
    review of a namespace already being read shares that GET; and a 404 is believed for a while, so
    the same forged name again costs nothing."""
    cache = NamespaceWatchCache(
        lambda: kube_api(fake.url), lookup_timeout=30, max_lookups=2, lookup_burst=100, negative_ttl=300
    )
    cache.start()
    try:
        assert cache.wait_synced(30)
        fake.hold_gets()
        out: dict[str, object] = {}
        first = _lookup_in_thread(cache, "forged-a", out)
        eventually(lambda: fake.gets() == ["forged-a"], what="the first GET")
        second = _lookup_in_thread(cache, "forged-b", out)
        eventually(lambda: sorted(fake.gets()) == ["forged-a", "forged-b"], what="the second GET")
        third = _lookup_in_thread(cache, "forged-c", out)
        third.join(20)  # no GET to wait for: answered at once (before, it made a third GET and waited)
        assert not third.is_alive() and "lookups of other namespaces in progress" in str(out["forged-c"])
        again: dict[str, object] = {}
        same = _lookup_in_thread(cache, "forged-a", again)  # shares the GET in flight (or its 404)
        fake.release_gets()
        for t in (first, second, same):
            t.join(20)
        assert out["forged-a"] == out["forged-b"] == again["forged-a"] == "not found (404)"
        assert sorted(fake.gets()) == ["forged-a", "forged-b"]
        with pytest.raises(NamespaceUnknown) as info:
            cache.lookup("forged-b")  # the 404 is remembered: no second GET
        assert "looked up less than" in info.value.reason
        assert sorted(fake.gets()) == ["forged-a", "forged-b"]
    finally:
        fake.release_gets()
        cache.stop()


def _blocked(thread: threading.Thread) -> bool:
    """The thread is parked in a ``wait`` (its innermost frame), e.g. on a lookup in progress.

    The collector is off while the frames are read: CPython 3.11 builds that dict holding the
    runtime's thread-list lock, so a collection it triggers can run a finalizer that closes a socket
    (an old kubernetes client's pool), which releases the GIL; a thread that is exiting then takes
    the GIL and waits for that lock, and the test hangs (seen once in a full run)."""
    gc.disable()
    try:
        frame = sys._current_frames().get(thread.ident or -1)
    finally:
        gc.enable()
    return frame is not None and frame.f_code.co_name == "wait"


def test_reviews_of_a_namespace_being_read_share_its_answer(fake):
    """Ten reviews of a namespace the watch has not delivered, while its GET is held: one GET, and
    every review gets the labels it found."""
    cache = NamespaceWatchCache(lambda: kube_api(fake.url), lookup_timeout=30)
    cache.start()
    try:
        assert cache.wait_synced(30)
        eventually(lambda: len(fake.watches()) == 1, what="the watch")
        fake.change_silently("late-team", SERVING)  # the open watch never sees it
        fake.hold_gets()
        found: list[dict[str, object]] = [{} for _ in range(10)]
        threads = [_lookup_in_thread(cache, "late-team", found[0])]
        eventually(lambda: fake.gets() == ["late-team"], what="the GET")
        for out in found[1:]:
            threads.append(_lookup_in_thread(cache, "late-team", out))
            eventually(lambda t=threads[-1]: _blocked(t), what="the review waiting for the GET in progress")
        fake.release_gets()
        for t in threads:
            t.join(20)
        assert [out["late-team"]["gpu-admission.io/tier"] for out in found] == ["serving"] * 10  # type: ignore[index]
        assert fake.gets() == ["late-team"]
    finally:
        fake.release_gets()
        cache.stop()


def test_lookups_per_second_are_capped(fake):
    """Random names defeat a cache of 404s; a rate does not: past ``lookup_burst`` (with a refill of
    one lookup every 1000 s here) a namespace is not looked up."""
    cache = NamespaceWatchCache(lambda: kube_api(fake.url), lookup_rate=0.001, lookup_burst=3)
    cache.start()
    try:
        assert cache.wait_synced(30)
        reasons = []
        for i in range(10):
            with pytest.raises(NamespaceUnknown) as info:
                cache.lookup(f"random-{i}")
            reasons.append(info.value.reason)
        assert reasons[:3] == ["not found (404)"] * 3
        assert all("lookups per second" in r for r in reasons[3:]), reasons
        assert fake.gets() == ["random-0", "random-1", "random-2"]
        assert cache.lookup("serving-team")["gpu-admission.io/tier"] == "serving"  # the cache needs no GET
    finally:
        cache.stop()


def test_offline_sources_have_no_facts_and_keep_the_name_label_only():
    """``--namespace-labels none`` and a file are the platform's word, not the cluster's: no lookup, no denial."""
    assert OfflineNamespaces().lookup("anything") is None
    assert StaticNamespaces({"a": SERVING}).lookup("b") is None
    assert StaticNamespaces({"a": SERVING}).lookup("a") == SERVING


# --- through the real server ---------------------------------------------------------------------




def _validate(client, obj: dict, namespace: str) -> dict:
    sent = review(obj, namespace=namespace)
    status, doc = client.post_review("validate", sent)
    assert status == 200
    return check_response(doc, sent, "validate")


def test_unknown_namespaces_in_a_gunicorn_worker(tmp_path: Path, server_certs):
    fake = FakeNamespaceAPI({"research": {}, "serving-team": SERVING}).start()
    server = cluster_server(tmp_path, server_certs, fake.url)
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




def test_forged_reviews_for_random_namespaces_cost_bounded_gets(tmp_path: Path, server_certs):
    """Anyone who reaches the webhook can post reviews. 100 of plain pods and 100 of GPU jobs, each in
    a namespace that does not exist, from 8 clients at once: the plain pods are none of the webhook's
    business and cost no GET (before: one each, after a 0.2 s wait in the request thread); the GPU
    ones cost at most what the lookup rate allows (10 at once, then 10 a second, per worker; before:
    one each); a real review is answered as usual meanwhile."""
    fake = FakeNamespaceAPI({"research": {}}).start()
    server = cluster_server(tmp_path, server_certs, fake.url, threads=4)
    server.start(wait_ready=False)
    plain = [f"plain-{uuid.uuid4().hex[:12]}" for _ in range(100)]
    gpu = [f"gpu-{uuid.uuid4().hex[:12]}" for _ in range(100)]
    answers: list[tuple[str, bool]] = []
    lock = threading.Lock()

    def flood(names: list[tuple[str, dict]]) -> None:
        client = server.client(timeout=30)
        try:
            for ns, obj in names:
                answer = _validate(client, obj, ns)
                with lock:
                    answers.append((ns, answer["allowed"]))
        finally:
            client.close()

    try:
        client = server.client()
        eventually(lambda: _ready(client), timeout=60, what="readiness after the first list")
        work = [(ns, objects.plain_pod()) for ns in plain] + [(ns, objects.training_vcjob()) for ns in gpu]
        work = work[::2] + work[1::2]  # plain and GPU mixed in every client's share
        threads = [threading.Thread(target=flood, args=(work[i::8],), daemon=True) for i in range(8)]
        started = time.monotonic()
        for t in threads:
            t.start()
        eventually(lambda: len(answers) >= 50, timeout=120, what="the flood under way")
        job = objects.training_vcjob()
        mutated = stored(client, job, "research")
        real_started = time.monotonic()
        assert _validate(client, mutated, "research")["allowed"] is True
        real = time.monotonic() - real_started
        for t in threads:
            t.join(120)
        elapsed = time.monotonic() - started
        client.close()
    finally:
        assert server.stop() == 0
        fake.stop()
    assert len(answers) == 200
    assert all(allowed for ns, allowed in answers if ns in set(plain)), "plain pods are allowed, anywhere"
    assert not any(allowed for ns, allowed in answers if ns in set(gpu)), "GPU objects in unknown namespaces are denied"
    looked_up = fake.gets()
    print(f"\n200 forged reviews in {elapsed:.1f} s: {len(looked_up)} GETs; a real review {real * 1000:.0f} ms")
    assert not set(looked_up) & set(plain), "a plain pod needs no namespace lookup"
    assert len(looked_up) <= 10 + 10 * elapsed, f"{len(looked_up)} GETs in {elapsed:.1f} s"
