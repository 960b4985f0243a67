"""MutatingAdmissionPolicies for the common class pod (Kubernetes 1.36 and later)."""

from __future__ import annotations

from webhook.policy.compiled import Policy
from webhook.render.core import K8sObject, RenderOptions

SERVED_FROM = (1, 36)


def render(policy: Policy, options: RenderOptions) -> list[K8sObject]:
    return []
