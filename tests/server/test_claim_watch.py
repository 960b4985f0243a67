"""The DRA object caches (ResourceClaimTemplates, ResourceClaims, DeviceClasses), driven by the real
``kubernetes`` client (``ResourceV1Api``) against the fake list/watch apiserver the namespace cache is
tested with, serving the ``resource.k8s.io/v1`` collection paths: first list, watch events, deletes,
a dropped watch resumed, an API the cluster does not serve (404), and the engine judging a pod through
the view the caches give."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.server.fake_apiserver import FakeNamespaceAPI
from tests.server.support import eventually, kube_api
from webhook.engine import Request, report
from webhook.server.claim_watch import ClaimObjects, ObjectWatchCache

BASE = "/apis/resource.k8s.io/v1"


def _api(url: str):
    return kube_api(url, "ResourceV1Api")


def template(name: str, ns: str, cls: str = "mig.nvidia.com") -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cls}}]}}},
    }


@pytest.fixture
def templates() -> Iterator[FakeNamespaceAPI]:
    api = FakeNamespaceAPI(path=f"{BASE}/resourceclaimtemplates", list_kind="ResourceClaimTemplateList").start()
    api.put(template("mig-small", "team-a"))
    yield api
    api.stop()


@pytest.fixture
def watch(templates) -> Iterator[ObjectWatchCache]:
    cache = ObjectWatchCache(
        lambda: _api(templates.url), "resourceclaimtemplates", backoff_initial=0.02, backoff_max=0.1, watch_timeout=30
    )
    cache.start()
    yield cache
    cache.stop()


def test_templates_are_listed_then_followed_by_watch(templates, watch):
    assert watch.wait_synced(5)
    assert ("team-a", "mig-small") in watch.objects
    templates.put(template("whole", "team-b", "gpu.nvidia.com"))
    eventually(lambda: ("team-b", "whole") in watch.objects, what="ADDED template")
    templates.remove("mig-small", "team-a")
    eventually(lambda: ("team-a", "mig-small") not in watch.objects, what="DELETED template")
    assert len(templates.lists()) == 1  # events, not re-lists
    assert templates.requests[0]["path"] == f"{BASE}/resourceclaimtemplates"


def test_a_dropped_watch_resumes_without_a_relist(templates, watch):
    assert watch.wait_synced(5)
    eventually(lambda: len(templates.watches()) == 1, what="first watch")
    templates.drop_watches()
    templates.put(template("later", "team-a"))
    eventually(lambda: ("team-a", "later") in watch.objects, what="event after the drop")
    assert len(templates.lists()) == 1
    assert templates.watches()[-1]["resourceVersion"] != ""


def test_an_api_the_cluster_does_not_serve_is_an_empty_synced_cache():
    nothing = FakeNamespaceAPI(path="/apis/other/v1/things").start()  # every resource.k8s.io path is 404
    try:
        cache = ObjectWatchCache(lambda: _api(nothing.url), "deviceclasses", backoff_initial=0.02)
        cache.start()
        assert cache.wait_synced(5) and cache.objects == {} and not cache.served
        cache.stop()
    finally:
        nothing.stop()


def test_not_ready_until_every_cache_has_synced_and_the_engine_reads_the_view(policy):
    servers = {
        "resourceclaimtemplates": FakeNamespaceAPI(path=f"{BASE}/resourceclaimtemplates"),
        "resourceclaims": FakeNamespaceAPI(path=f"{BASE}/resourceclaims"),
        "deviceclasses": FakeNamespaceAPI(path=f"{BASE}/deviceclasses"),
    }
    servers["resourceclaimtemplates"].put(template("mig-small", "team-a"))
    servers["resourceclaimtemplates"].fail_lists = 3  # the first lists fail: not ready meanwhile
    for server in servers.values():
        server.start()
    objects = ClaimObjects(
        {
            name: ObjectWatchCache((lambda url: lambda: _api(url))(server.url), name, backoff_initial=0.05)
            for name, server in servers.items()  # one fake apiserver per collection
        }
    )
    try:
        objects.start()
        assert not objects.ready
        assert objects.wait_synced(10)
        view = objects.cluster()
        assert view.complete and ("team-a", "mig-small") in view.claim_templates
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "team-a"},
            "spec": {
                "nodeName": "n1",
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "mig-small"}],
                "containers": [{"name": "c", "image": "i", "resources": {"claims": [{"name": "gpu"}]}}],
            },
        }
        decision = report(policy, Request(pod, namespace="team-a", cluster=view))
        got = {v.rule for v in decision.violations}
        assert "node-name-set" in got and "claim-unresolved" not in got
    finally:
        objects.stop()
        for server in servers.values():
            server.stop()


def test_resource_slices_and_compute_domains_are_watched_and_judged_with(policy):
    from webhook.engine.model.claims import cluster_entry

    slices = FakeNamespaceAPI(path=f"{BASE}/resourceslices", list_kind="ResourceSliceList").start()
    domains = FakeNamespaceAPI(
        path="/apis/resource.nvidia.com/v1beta1/computedomains", list_kind="ComputeDomainList"
    ).start()
    slices.put(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "node-1-gpu"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "node-1", "pool": {"name": "node-1"}, "devices": [
                {"name": "gpu-0", "allowMultipleAllocations": True, "capacity": {"memory": {
                    "value": "80Gi", "requestPolicy": {"default": "8Gi", "validRange": {"min": "8Gi", "step": "8Gi"}},
                }}},
            ]},
        }
    )  # fmt: skip
    cd = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "nvl-a", "namespace": "team-a"},
        "spec": {"numNodes": 4, "channel": {"resourceClaimTemplate": {"name": "nvl-a-channel"}}},
    }
    caches = {
        "resourceslices": ObjectWatchCache(lambda: _api(slices.url), "resourceslices", backoff_initial=0.05),
        "computedomains": ObjectWatchCache(lambda: _api(domains.url), "computedomains", backoff_initial=0.05),
    }
    for name in ("resourceclaimtemplates", "resourceclaims", "deviceclasses"):
        caches[name] = ObjectWatchCache(lambda: _api(slices.url), name, backoff_initial=0.05)  # 404: empty, synced
    objects = ClaimObjects(caches)
    try:
        objects.start()
        assert objects.wait_synced(10)
        assert "node-1-gpu" in objects.cluster().resource_slices
        domains.put(cd)
        eventually(lambda: ("team-a", "nvl-a") in objects.cluster().compute_domains, what="ADDED ComputeDomain")
        assert domains.requests[0]["path"] == "/apis/resource.nvidia.com/v1beta1/computedomains"
        view = objects.cluster()
        big = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "big", "namespace": "team-a"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": "96Gi"}}}}]}}},
        }  # fmt: skip
        (v,) = report(policy, Request(big, namespace="team-a", cluster=view)).violations
        assert v.rule == "claim-capacity-unsatisfiable" and "at most 80Gi" in v.message
        # the domain is known to the resolver: a pod naming its channel template is matched with it
        from webhook.engine.model.claims import ClaimResolver

        channel = cluster_entry(cd)
        assert channel is not None
        assert ClaimResolver(policy, view, "team-a").compute_domain("nvl-a-channel") == "nvl-a"
    finally:
        objects.stop()
        slices.stop()
        domains.stop()
