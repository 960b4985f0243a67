"""The platform's ResourceClaimTemplates, for the namespaces entitled to each DRA pool.

A pod the webhook sends to a DRA pool names one of these templates (``webhook.policy.dra``); the
webhook never creates them (admission has no side effects), so the platform applies them with the
rest of its GitOps. A namespace gets the templates of every pool its entitlement reaches, judged from
its labels as admission judges them (``--context`` Namespace objects), or from its name alone.
"""

from __future__ import annotations

from webhook.policy.compiled import Policy
from webhook.render.core import K8sObject, RenderOptions

NAME_LABEL = "kubernetes.io/metadata.name"


def render(policy: Policy, options: RenderOptions) -> list[K8sObject]:
    if not policy.dra.templates:
        return []
    names = list(dict.fromkeys((*options.namespaces, *options.namespace_labels)))
    out: list[K8sObject] = []
    for ns in names:
        labels = {**options.namespace_labels.get(ns, {}), NAME_LABEL: ns}
        entitlement = policy.entitlement(labels)
        seen: set[str] = set()
        for pool in policy.entitled_pools(entitlement, None):
            for template in policy.dra.pool_templates.get(pool, ()):
                if template.name not in seen:
                    seen.add(template.name)
                    out.append(template.manifest(ns))
    return out
