"""Where namespace labels come from: nowhere (offline), a file, or a watch on the cluster's namespaces.

Namespace-scoped policy (entitlements, per-namespace rule actions, exemptions) needs the labels of the
namespace a review is in. The AdmissionReview does not carry them, and the hot path must not call the
API, so labels come from one of these sources, chosen once at start:

* ``none`` (offline, default outside a cluster): ``None``; the engine then assumes only the label the
  apiserver sets on every namespace, ``kubernetes.io/metadata.name: <ns>``.
* a YAML file (``--namespaces FILE``): ``{namespace: {label: value}}`` or Namespace objects / a
  NamespaceList (``kubectl get ns -o yaml``), the same formats ``gpu-admission check`` reads; a
  namespace it does not list gets the name label only (the file is the platform's word).
* ``cluster`` (default in a pod): :class:`webhook.server.namespace_watch.NamespaceWatchCache`, a
  list/watch cache. Imported lazily: the kubernetes client costs ~0.5 s of import and memory that
  the offline modes do not need. It speaks for the cluster: a namespace it does not know is looked
  up with one GET, and one that stays unknown raises :class:`NamespaceUnknown` from ``lookup``, so
  that it is denied instead of being judged by the catch-all entitlement. The GET is made only for
  objects the engine says need the namespace (``Decision.namespace_unknown``), a 404 is remembered
  briefly, and lookups are capped in number and in rate, never waited for by sleeping.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from webhook.namespace_labels import read_namespace_file

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"


class NamespaceUnknown(Exception):
    """The source speaks for the cluster and could not find the namespace (not cached, and a lookup
    answered 404, failed or timed out): its labels, hence its entitlement, are unknown."""

    def __init__(self, namespace: str, reason: str):
        super().__init__(f"namespace {namespace} unknown: {reason}")
        self.namespace = namespace
        self.reason = reason


class NamespaceSource(Protocol):
    speaks_for_cluster: bool
    """True when a namespace ``labels`` does not know may exist with other labels (the watch cache):
    it is then judged unknown until ``lookup`` finds it. False: ``None`` means no facts (offline)."""

    def labels(self, namespace: str) -> dict[str, str] | None:
        """What the source holds now, without I/O and without waiting."""
        ...

    def lookup(self, namespace: str) -> dict[str, str] | None:
        """Labels for a review: like ``labels``, but a source that speaks for the cluster looks a
        miss up and raises :class:`NamespaceUnknown` when it stays unknown. ``None``: no facts
        (offline), the engine assumes the name label only."""
        ...

    @property
    def ready(self) -> bool: ...

    def status(self) -> dict[str, Any]: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class OfflineNamespaces:
    """No labels known: the engine falls back to the namespace name label."""

    ready = True
    speaks_for_cluster = False

    def labels(self, namespace: str) -> dict[str, str] | None:
        return None

    def lookup(self, namespace: str) -> dict[str, str] | None:
        return self.labels(namespace)

    def status(self) -> dict[str, Any]:
        return {"mode": "none", "status": "ok"}

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class StaticNamespaces(OfflineNamespaces):
    """Labels from a file read at start; namespaces it does not list get the name label only."""

    def __init__(self, labels: dict[str, dict[str, str]], source: str = ""):
        self._labels = labels
        self.source = source

    def labels(self, namespace: str) -> dict[str, str] | None:
        return self._labels.get(namespace)

    def status(self) -> dict[str, Any]:
        return {"mode": "file", "status": "ok", "file": self.source, "namespaces": len(self._labels)}


def namespace_source(spec: str, kubeconfig: str | None = None, **watch_options: Any) -> NamespaceSource:
    """``spec`` is ``auto`` | ``none`` | ``cluster`` | a file path (see the module docstring)."""
    if spec == "auto":
        spec = "cluster" if os.environ.get(IN_CLUSTER_ENV) else "none"
    if spec == "none":
        return OfflineNamespaces()
    if spec == "cluster":
        from webhook.server.namespace_watch import NamespaceWatchCache, api_from_config

        return NamespaceWatchCache(lambda: api_from_config(kubeconfig), **watch_options)
    return StaticNamespaces(read_namespace_file(spec), spec)
