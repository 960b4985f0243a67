"""Where namespace labels come from: nowhere (offline), a file, or a watch on the cluster's namespaces.

Namespace-scoped policy (entitlements, per-namespace rule actions, exemptions) needs the labels of the
namespace a review is in. The AdmissionReview does not carry them, and the hot path must not call the
API, so labels come from one of these sources, chosen once at start:

* ``none`` (offline, default outside a cluster): ``None``; the engine then assumes only the label the
  apiserver sets on every namespace, ``kubernetes.io/metadata.name: <ns>``.
* a YAML file (``--namespaces FILE``): ``{namespace: {label: value}}`` or Namespace objects / a
  NamespaceList (``kubectl get ns -o yaml``), the same formats ``gpu-admission check`` reads.
* ``cluster`` (default in a pod): :class:`webhook.server.namespace_watch.NamespaceWatchCache`, a
  list/watch cache. Imported lazily: the kubernetes client costs ~0.5 s of import and memory that
  the offline modes do not need.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from webhook.namespace_labels import read_namespace_file

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"


class NamespaceSource(Protocol):
    def labels(self, namespace: str) -> dict[str, str] | None: ...

    @property
    def ready(self) -> bool: ...

    def status(self) -> dict[str, Any]: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class OfflineNamespaces:
    """No labels known: the engine falls back to the namespace name label."""

    ready = True

    def labels(self, namespace: str) -> dict[str, str] | None:
        return None

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
