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
from pathlib import Path
from typing import Any, Protocol

import yaml

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


def read_namespace_file(path: str | Path) -> dict[str, dict[str, str]]:
    """Parse ``{ns: {label: value}}`` or Namespace/NamespaceList/List documents; ValueError on bad shape."""
    out: dict[str, dict[str, str]] = {}
    text = Path(path).read_text(encoding="utf-8")
    for doc in yaml.safe_load_all(text):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ValueError(f"{path}: expected a mapping of namespace -> labels or Namespace objects")
        if doc.get("kind") == "Namespace":
            items: list[Any] | None = [doc]
        elif doc.get("kind") in ("List", "NamespaceList"):
            items = doc.get("items") or []
        else:
            items = None
        if items is not None:
            for item in items:
                meta = item.get("metadata") if isinstance(item, dict) else None
                if not isinstance(meta, dict) or not meta.get("name"):
                    raise ValueError(f"{path}: a Namespace without metadata.name")
                out[str(meta["name"])] = _labels(path, meta["name"], meta.get("labels"))
            continue
        for name, labels in doc.items():
            out[str(name)] = _labels(path, name, labels)
    return out


def _labels(path: str | Path, name: Any, labels: Any) -> dict[str, str]:
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise ValueError(f"{path}: namespace {name!r} must map to a label map, got {type(labels).__name__}")
    return {str(k): str(v) for k, v in labels.items()}


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
