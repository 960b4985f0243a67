"""The PriorityClasses the policy's classes name.

The Priority admission plugin rejects a pod whose ``priorityClassName`` does not exist, so a class that
sets one without the object existing breaks every mutated pod of that class on a new cluster. Only the
entries of ``spec.priorityClasses`` are rendered: names defined elsewhere (``system-*``, a platform's
own) are the cluster's business, and ``policy lint`` warns about a class naming one the policy does
not define.
"""

from __future__ import annotations

from webhook.policy.compiled import Policy
from webhook.render.core import K8sObject, RenderOptions


def render(policy: Policy, options: RenderOptions) -> list[K8sObject]:
    out: list[K8sObject] = []
    for name, spec in sorted(policy.spec.priority_classes.items()):
        users = sorted(c for c, cls in policy.classes.items() if cls.priority_class_name == name)
        obj: K8sObject = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": options.app}},
            "value": spec.value,
            "globalDefault": False,
            "preemptionPolicy": spec.preemption_policy,
        }
        description = spec.description or (f"gpu-admission classes: {', '.join(users)}" if users else "")
        if description:
            obj["description"] = description
        out.append(obj)
    return out
