"""List/watch caches of the DRA objects claims are resolved through: ResourceClaimTemplates and
ResourceClaims (namespaced, watched across namespaces), DeviceClasses and ResourceSlices (cluster-scoped:
the devices' capacity request policies) and NVIDIA's ComputeDomains (namespaced; a CRD, listed through
the custom-objects API).

An AdmissionReview carries the pod, not the template its claim names, and the hot path must not call
the API; so each worker keeps these objects the way it keeps namespace labels
(:class:`~webhook.server.namespace_watch.NamespaceWatchCache`: list, watch from the list's
resourceVersion, resume after a dropped watch, re-list only on 410 Gone). The loop is that class's;
only what is listed and what is kept differ. The engine gets them as one
:class:`~webhook.engine.model.cluster.Cluster` view per review, marked ``complete`` once every cache has
synced (then a template that is not there does not exist).

A cluster that does not serve ``resource.k8s.io/v1`` (before 1.34) answers the list with 404: that is
an empty, synced cache ("no DRA here"), not a readiness failure.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import orjson

from webhook.engine.model.cluster import Cluster
from webhook.server.logs import server_log
from webhook.server.namespace_watch import NamespaceWatchCache

# resource -> (ResourceV1Api list method, whether the objects are namespaced)
RESOURCES: dict[str, tuple[str, bool]] = {
    "resourceclaimtemplates": ("list_resource_claim_template_for_all_namespaces", True),
    "resourceclaims": ("list_resource_claim_for_all_namespaces", True),
    "deviceclasses": ("list_device_class", False),
    # the devices' capacity and its request policies (consumable capacity is judged at admission)
    "resourceslices": ("list_resource_slice", False),
    # NVIDIA's DRA driver CRD (multi-node NVLink): listed through the custom-objects API; a cluster
    # without the driver answers 404, an empty synced cache
    "computedomains": ("custom:resource.nvidia.com/v1beta1", True),
}


def resource_api_from_config(kubeconfig: str | None = None) -> Any:
    """ResourceV1Api, configured as the namespace watch's client is."""
    from kubernetes import client

    from webhook.server.namespace_watch import api_client_from_config

    return client.ResourceV1Api(api_client_from_config(kubeconfig))


class _Lister:
    """Presents one list method as ``list_namespace``, the call the namespace cache's loop makes."""

    def __init__(self, api: Any, method: str, plural: str = ""):
        if method.startswith("custom:"):  # a CRD: the same client's CustomObjectsApi
            from kubernetes import client

            group, _, version = method.removeprefix("custom:").partition("/")
            custom = client.CustomObjectsApi(api.api_client)
            self._call = functools.partial(custom.list_cluster_custom_object, group, version, plural)
        else:
            self._call = getattr(api, method)

    def list_namespace(self, **kwargs: Any) -> Any:
        return self._call(**kwargs)


class ObjectWatchCache(NamespaceWatchCache):
    """One resource's objects by key ((namespace, name) or name), kept current by list + watch."""

    def __init__(
        self,
        api_factory: Callable[[], Any],
        resource: str,
        *,
        spec: tuple[str, bool] | None = None,
        keep: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        **options: Any,
    ):
        method, namespaced = spec if spec is not None else RESOURCES[resource]
        super().__init__(lambda: _Lister(api_factory(), method, resource), **options)
        self.resource = resource
        self.namespaced = namespaced
        self.objects: dict[Any, dict[str, Any]] = {}
        self.served = True
        # what is kept of each object (nodes: labels, taints, allocatable, not the image list)
        self._keep = keep or (lambda obj: obj)
        self.version = 0  # bumped on every change, so derived views are rebuilt only when needed

    def _key(self, obj: dict[str, Any]) -> Any:
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not name:
            return None
        return (meta.get("namespace") or "", name) if self.namespaced else name

    def start(self) -> None:  # the namespace cache's, without its metrics
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"gpu-admission-{self.resource}", daemon=True)
        self._thread.start()

    def status(self) -> dict[str, Any]:
        out = {"status": "ok" if self.ready else "syncing", "objects": len(self.objects), "served": self.served}
        if self.last_error:
            out["last_error"] = self.last_error
        return out

    def _list(self, api: Any, reason: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = api.list_namespace(_preload_content=False, _request_timeout=self.request_timeout)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self._not_served()
            return
        try:
            doc = orjson.loads(resp.data)
        finally:
            resp.release_conn()
        fresh = {}
        for item in doc.get("items") or ():
            key = self._key(item)
            if key is not None:
                fresh[key] = self._keep(item)
        with self._changed:
            self.objects = fresh  # one swap: readers see the old or the new map
            self.version += 1
            self.resource_version = (doc.get("metadata") or {}).get("resourceVersion")
            self._changed.notify_all()
        self.lists += 1
        self.last_error = None
        if not self._synced.is_set():
            self._synced.set()
            server_log.info(
                f"{self.resource} cache synced",
                extra={"fields": {"objects": len(fresh), "resource_version": self.resource_version}},
            )

    def _not_served(self) -> None:
        """The API is not served (a cluster before 1.34): nothing to cache, nothing to wait for."""
        self.served = False
        self.objects = {}
        if not self._synced.is_set():
            self._synced.set()
            server_log.info(f"{self.resource}: resource.k8s.io/v1 is not served; DRA objects are not watched")

    def _watch(self, api: Any) -> None:
        if not self.served:  # nothing to watch until the server restarts (after a cluster upgrade)
            self._stopped.wait(3600)
            return
        super()._watch(api)

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            super()._apply(event)  # 410 -> re-list; others raise
            return
        key = self._key(obj)
        with self._changed:
            if kind in ("ADDED", "MODIFIED") and key is not None:
                self.objects[key] = self._keep(obj)
                self.version += 1
            elif kind == "DELETED" and key is not None:
                self.objects.pop(key, None)
                self.version += 1
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self.resource_version = rv
            self._changed.notify_all()


class ClaimObjects:
    """The three caches, as the engine's cluster view. ``ready`` once all have synced."""

    def __init__(self, caches: dict[str, ObjectWatchCache]):
        self.caches = caches

    @classmethod
    def from_api(cls, api_factory: Callable[[], Any], **options: Any) -> ClaimObjects:
        return cls({name: ObjectWatchCache(api_factory, name, **options) for name in RESOURCES})

    @property
    def ready(self) -> bool:
        return all(c.ready for c in self.caches.values())

    def wait_synced(self, timeout: float) -> bool:
        return all(c.wait_synced(timeout) for c in self.caches.values())

    def start(self) -> None:
        for cache in self.caches.values():
            cache.start()

    def stop(self) -> None:
        for cache in self.caches.values():
            cache.stop()

    def status(self) -> dict[str, Any]:
        return {name: cache.status() for name, cache in self.caches.items()}

    def cluster(self) -> Cluster:
        """A view over the live maps (read-only proxies: no copy per review)."""
        c = self.caches
        slices, domains = c.get("resourceslices"), c.get("computedomains")
        return Cluster(
            claim_templates=MappingProxyType(c["resourceclaimtemplates"].objects),
            claims=MappingProxyType(c["resourceclaims"].objects),
            device_classes=MappingProxyType(c["deviceclasses"].objects),
            resource_slices=MappingProxyType(slices.objects) if slices is not None else MappingProxyType({}),
            compute_domains=MappingProxyType(domains.objects) if domains is not None else MappingProxyType({}),
            complete=self.ready,
        )
