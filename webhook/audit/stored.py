"""What of a stored object is the user's: the object as the validating webhook saw it at CREATE.

An object read back from the apiserver carries what the system wrote after admission: the
scheduler's binding (``spec.nodeName``), ``status``, and the bookkeeping the apiserver stamps on
storage (``uid``, ``resourceVersion``, ``creationTimestamp``, ``generation``, ``managedFields``).
None of it was the user's choice, so none of it may read as a finding: a bound GPU pod is not
``node-name-set`` because the scheduler put it on a node.

Why strip rather than judge an UPDATE of the object against itself: the engine reports on UPDATE
only what the update introduces, so an object judged against itself reports nothing at all, the
violations it has included. Audit wants the opposite: every finding the stored object carries.
Fields the apiserver *defaults* before admission (``schedulerName: default-scheduler``, a global
default ``priorityClassName``, the service-account volume) stay: ``/validate`` saw them too.

``spec.nodeName`` of a Pod is kept only where ``managedFields`` record that the pod's own create or
update wrote it (a user who pinned the pod); a binding is not recorded there. Without
``managedFields`` (``kubectl get -o yaml`` hides them unless ``--show-managed-fields``), nodeName is
taken as the scheduler's.
"""

from __future__ import annotations

from typing import Any

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

_STORAGE_METADATA = (
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


def metadata(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def is_mirror_pod(obj: dict[str, Any]) -> bool:
    """A static pod's mirror: the kubelet writes it and the webhook never intercepts it."""
    annotations = metadata(obj).get("annotations")
    return obj.get("kind") == "Pod" and isinstance(annotations, dict) and MIRROR_ANNOTATION in annotations


def user_set_node_name(obj: dict[str, Any]) -> bool:
    """Whether ``managedFields`` show that a create or update of the pod itself set ``spec.nodeName``."""
    entries = metadata(obj).get("managedFields")
    if not isinstance(entries, list):
        return False
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("subresource"):
            continue  # status and binding writes are the system's
        fields = entry.get("fieldsV1")
        spec = fields.get("f:spec") if isinstance(fields, dict) else None
        if isinstance(spec, dict) and "f:nodeName" in spec:
            return True
    return False


def as_admitted(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without what the system set after admission (a shallow copy; ``obj`` is not changed)."""
    out = {k: v for k, v in obj.items() if k != "status"}
    meta = metadata(obj)
    if meta:
        out["metadata"] = {k: v for k, v in meta.items() if k not in _STORAGE_METADATA}
    spec = obj.get("spec")
    if obj.get("kind") == "Pod" and isinstance(spec, dict) and spec.get("nodeName") and not user_set_node_name(obj):
        out["spec"] = {k: v for k, v in spec.items() if k != "nodeName"}
    return out


def controller_of(obj: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the object's managing controller (the ``controller: true`` owner reference)."""
    refs = metadata(obj).get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") and ref.get("name"):
            return str(ref["kind"]), str(ref["name"])
    return None
