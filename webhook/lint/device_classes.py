"""``policy lint --cluster-objects`` with DeviceClass objects: extended resources the cluster maps that the
rendered webhook configurations do not know.

A DeviceClass may map an extended resource (``spec.extendedResourceName``, KEP-5004): the engine then counts
a pod asking for it as a GPU pod, through the class. The webhooks' matchConditions are rendered from the
policy (its GPU prefixes and ``spec.deviceClasses``), and from the cluster's classes only when the render
is given them (``policy render --cluster-objects``); a name neither knows is sent to no webhook, so such
pods are stored unjudged. This warns about each such name, where the policy is.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from webhook.lint.checks import LintFinding, Locator, Warning_
from webhook.policy.compiled import Policy
from webhook.policy.dra import cluster_extended
from webhook.policy.loader import PolicyError, load_policy_texts, policy_files

CODE = "device-class-unrendered"


def unrendered(policy: Policy, device_classes: Mapping[str, Mapping[str, Any]]) -> list[Warning_]:
    """One warning per extended resource a cluster DeviceClass maps that a render of the policy alone
    does not send (not a GPU prefix, not an implicit class name, not a class of the policy)."""
    from webhook.render.webhooks import IMPLICIT_EXTENDED, extended_names

    known = set(extended_names(policy))
    out = []
    for resource, name in sorted(cluster_extended(device_classes).items()):
        if resource in known or policy.is_gpu_resource(resource) or resource.startswith(IMPLICIT_EXTENDED):
            continue
        out.append(
            Warning_(
                CODE,
                ("deviceClasses",),
                f"DeviceClass {name!r} of the cluster maps extended resource {resource!r}, which the webhook "
                "configurations rendered from this policy do not send to the webhooks: pods asking for it are "
                "stored unjudged",
                "render with `gpu-admission policy render --cluster-objects FILE` (the DeviceClass objects), or "
                f"add {name!r} to spec.deviceClasses with extendedResourceName: {resource}",
            )
        )
    return out


def findings(path: str | Path, device_classes: Mapping[str, Mapping[str, Any]]) -> list[LintFinding]:
    """:func:`unrendered` for the policy at ``path``, placed at its file and line; nothing when the policy
    does not load (``lint_path`` reports why)."""
    if not device_classes:
        return []
    try:
        texts = [(str(f), f.read_text(encoding="utf-8")) for f in policy_files(path)]
        policy = load_policy_texts(texts)
    except (PolicyError, OSError, UnicodeDecodeError):
        return []
    locator = Locator(texts)
    return [LintFinding(w.at(locator), w.code) for w in unrendered(policy, device_classes)]
