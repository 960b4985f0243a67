"""The policy-dependent half of the Helm chart, rendered from the policy like everything else.

The chart (``charts/gpu-admission``) templates what does not depend on the policy (the Deployment,
RBAC, TLS, the audit, monitoring). What does — the PriorityClasses the classes name, the namespace
label guard, the webhook configurations whose ``rules`` and ``matchConditions`` follow the policy's
prefix and GPU resource names, the in-tree admission policies — must never be hand-copied into
templates, or a policy that adds a GPU resource name would ship webhooks that never see it. So
``policy render --chart DIR`` writes one *bundle* the chart reads with ``.Files.Get``, and
``policy render --helm-values`` prints the same bundle as a values file (``policy.bundle``).

The bundle carries the policy files themselves and their digest: the chart refuses to install a
bundle whose files do not hash to the digest the objects were rendered from (a policy edited in a
values file without re-rendering), and, at install, an existing policy ConfigMap holding another
policy. The release namespace is not known when the bundle is rendered: the objects name
:data:`NAMESPACE_PLACEHOLDER`, which the chart replaces.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from webhook.policy.compiled import Policy
from webhook.render.core import RENDERERS, K8sObject, RenderOptions

NAMESPACE_PLACEHOLDER = "@@RELEASE_NAMESPACE@@"
BUNDLE_PATH = "files/policy-bundle.json"
FORMAT = 1

# Rendered by the chart's own templates from values: the ConfigMap (policy from the bundle or an
# existing ConfigMap) and the NetworkPolicy (control-plane CIDRs, monitoring namespace are values).
_TEMPLATED = {"policy-configmap", "network-policy", "claim-templates"}


def policy_digest(files: Sequence[tuple[str, str]]) -> str:
    """sha256 over the files sorted by name, each ``name \\n text \\n``: what the chart recomputes with
    ``sha256sum`` (Go sorts names bytewise, which is code-point order for UTF-8, as Python does)."""
    text = "".join(f"{name}\n{body}\n" for name, body in sorted(files))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _availability(objects: list[K8sObject]) -> dict[str, Any]:
    """What a mode changes on the webhook configurations: their annotations and the validating failurePolicy."""
    by_kind = {o["kind"]: o for o in objects}
    validating = by_kind["ValidatingWebhookConfiguration"]
    return {
        "annotations": dict(validating["metadata"].get("annotations", {})),
        "validatingFailurePolicy": validating["webhooks"][0]["failurePolicy"],
    }


def bundle(policy: Policy, files: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The bundle for ``files`` (the policy directory's files, as the ConfigMap carries them)."""
    from webhook.render import intree
    from webhook.render.intree import runtimecost

    base = RenderOptions(namespace=NAMESPACE_PLACEHOLDER, availability="webhook")
    objects: list[K8sObject] = []
    for name, renderer in RENDERERS:
        if name not in _TEMPLATED:
            objects.extend(renderer(policy, base))
    open_mode = [o for n, r in RENDERERS if n in {"mutating-webhook", "validating-webhook"}
                 for o in r(policy, replace(base, availability="in-tree"))]  # fmt: skip
    # 1.36 and mutating: the validating policies are the same for every version; the chart keeps the
    # MutatingAdmissionPolicies only where the cluster serves them (value inTree.mutating)
    runtimecost.check(objects + open_mode, in_tree=False)
    in_tree = intree.render(policy, replace(base, kube_version=(1, 36), mutating=True))
    return {
        "format": FORMAT,
        "generatedBy": "gpu-admission policy render --chart (do not edit by hand)",
        "namespacePlaceholder": NAMESPACE_PLACEHOLDER,
        "policyDigest": policy_digest(files),
        "files": dict(sorted(files)),
        "objects": objects,
        "availability": {"webhook": _availability(objects), "in-tree": _availability(open_mode)},
        "inTree": in_tree,
    }


def bundle_text(content: dict[str, Any]) -> str:
    """The bundle file's text (what ``policy render --chart`` writes and the drift test compares)."""
    return json.dumps(content, indent=1, ensure_ascii=False) + "\n"
