"""A ``<resource>/scale`` review judged as the object it scales: the server reads the parent.

``kubectl scale sts train --replicas 8`` (and every HorizontalPodAutoscaler) sends the validating
webhook an ``autoscaling/v1`` Scale, which carries a name and a count and nothing the gang rules
judge: not the class, not the template, not the gang keys. The engine has no lookups, so the parent
is read here, at the server's edge, with one GET (``get`` on the scalable kinds is in the webhook's
ClusterRole), and the engine judges the UPDATE of the parent from its stored count to the Scale's
(:func:`webhook.engine.scale.scaled`).

A parent that cannot be read (no cluster access, 404, an API error, a timeout, too many reads at
once) leaves the scale unjudged, and ``/validate`` never admits what it did not judge: the review is
denied with the reason and "retry". The matchConditions send only scales that change the count, of
the kinds whose scale subresource the kind table declares.

Bounded: at most :data:`MAX_CONCURRENT` reads per worker at a time, each within ``timeout`` seconds
in total, with no waiting for a slot (a request thread never sleeps here): a flood of forged scale
reviews costs each at most one GET and is refused beyond the bound.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from webhook.engine.scale import scale_replicas, scaled
from webhook.policy.compiled import Policy
from webhook.policy.kinds import CompiledKind

MAX_CONCURRENT = 4


class ParentUnavailable(Exception):
    """The parent of a Scale could not be read or used; ``reason`` says why (no object content)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class ParentReader(Protocol):
    def read(self, group: str, version: str, resource: str, namespace: str, name: str) -> dict[str, Any]:
        """The object as stored; raises :class:`ParentUnavailable`."""
        ...


def object_path(group: str, version: str, resource: str, namespace: str, name: str) -> str:
    """The REST path of one namespaced object (core group under ``/api``)."""
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    return f"{base}/namespaces/{namespace}/{resource}/{name}"


class ApiParents:
    """Reads parents with the kubernetes client (the ServiceAccount's token): ``GET`` of the object's
    REST path (:func:`object_path`), which ``CustomObjectsApi`` builds for any API group, apps included."""

    def __init__(self, client_factory: Callable[[], Any], *, timeout: float = 1.0):
        self._client_factory = client_factory
        self._client: Any = None
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_CONCURRENT)
        self.timeout = timeout

    def _api(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._client_factory()
            return self._client

    def read(self, group: str, version: str, resource: str, namespace: str, name: str) -> dict[str, Any]:
        if not self._slots.acquire(blocking=False):
            raise ParentUnavailable(f"more than {MAX_CONCURRENT} scale reviews at once in this worker")
        try:
            if not group:  # the kind table's scalable kinds are all in API groups (CustomObjectsApi's path)
                raise ParentUnavailable("a core-group object cannot be read for a scale")
            from kubernetes import client

            resp = client.CustomObjectsApi(self._api()).get_namespaced_custom_object(
                group, version, namespace, resource, name, _preload_content=False, _request_timeout=self.timeout
            )
            try:
                doc = orjson.loads(resp.data)
            finally:
                resp.release_conn()
        except ParentUnavailable:
            raise
        except Exception as exc:
            raise ParentUnavailable(_read_error(exc)) from None
        finally:
            self._slots.release()
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        if not isinstance(meta, dict) or meta.get("name") != name or meta.get("namespace", namespace) != namespace:
            raise ParentUnavailable("the apiserver answered something other than this object")
        return doc


def _read_error(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    if status == 404:
        return "not found (404)"
    if isinstance(status, int) and status:
        return f"the apiserver answered {status} {getattr(exc, 'reason', '') or ''}".strip()
    return type(exc).__name__


def scalable_kind(policy: Policy, group: str, version: str, resource: str) -> CompiledKind | None:
    """The kind-table row whose ``<resource>/scale`` this is, when its scale subresource is declared."""
    api_version = f"{group}/{version}" if group else version
    for kind in policy.kinds.values():
        if kind.api_version == api_version and kind.spec.plural == resource and kind.scale is not None:
            return kind
    return None


def parent_update(
    policy: Policy,
    resource: tuple[str, str, str] | None,
    namespace: str | None,
    name: str,
    scale: Any,
    reader: ParentReader | None,
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(the parent with the Scale's count, the parent as stored) for the engine to judge as an UPDATE;
    None when the scale is of no kind whose size the policy reads (nothing to judge). Raises
    :class:`ParentUnavailable` when the parent is needed and cannot be had."""
    if resource is None:
        raise ParentUnavailable("the review names no request.resource")
    group, version, plural = resource
    kind = scalable_kind(policy, group, version, plural)
    if kind is None:
        return None
    replicas = scale_replicas(scale)
    if replicas is None:
        raise ParentUnavailable("the Scale has no integer spec.replicas")
    if not namespace or not name:
        raise ParentUnavailable("the review names no namespace or object")
    if reader is None:
        raise ParentUnavailable("this server has no access to the cluster to read it")
    parent = reader.read(group, version, plural, namespace, name)
    if parent.get("apiVersion") in (None, "") or parent.get("kind") in (None, ""):
        parent = {**parent, "apiVersion": kind.api_version, "kind": kind.kind}  # a typed GET always has them
    new = scaled(kind, parent, replicas)
    if new is None:
        raise ParentUnavailable(f"its {'.'.join(map(str, kind.scale or ()))} cannot be set")
    return new, parent
