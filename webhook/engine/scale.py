"""A Scale (``autoscaling/v1``, the ``<resource>/scale`` subresource) as the object it scales.

``kubectl scale sts train --replicas 8`` and a HorizontalPodAutoscaler write only a Scale: its
``spec.replicas`` lands in one field of the parent (``spec.replicas``; a CRD's ``specReplicasPath``,
the kind table's ``scale.replicas``). The gang rules read the parent's pod count, so the scale is
judged as an UPDATE of the parent with that field set: the stored parent is the old object, the
parent with the new count the new one. The engine has no lookup: the server reads the parent from
the apiserver and hands it here (``webhook.server.scale``).
"""

from __future__ import annotations

from typing import Any

from webhook.policy.kinds import CompiledKind

SCALE_SUBRESOURCE = "scale"


def scale_replicas(scale: Any) -> int | None:
    """``spec.replicas`` of a Scale, or None when it holds no integer (the apiserver validates it)."""
    spec = scale.get("spec") if isinstance(scale, dict) else None
    value = spec.get("replicas") if isinstance(spec, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def scaled(kind: CompiledKind, parent: dict[str, Any], replicas: int) -> dict[str, Any] | None:
    """``parent`` with its scale field set to ``replicas`` (copied along that path only), or None when
    the kind has no scale subresource or the path cannot be written (a missing replica spec: the
    apiserver answers such a scale with an error before any webhook)."""
    if kind.scale is None:
        return None
    out = dict(parent)
    node: dict[str, Any] = out
    *parents, last = kind.scale
    for part in parents:
        child = node.get(part) if isinstance(part, str) else None
        if not isinstance(child, dict):
            return None
        child = dict(child)
        node[part] = child  # type: ignore[index]
        node = child
    node[last] = replicas  # type: ignore[index]
    return out
