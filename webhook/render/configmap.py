"""The policy ConfigMap the server mounts, so shipping a policy is the same render as everything else.

A stable name (no content hash): the server hot-reloads the mounted directory when the ConfigMap
changes and keeps the last good policy if the new one is broken; a hash suffix would instead turn
every policy edit into a rolling restart.
"""

from __future__ import annotations

from webhook.policy.compiled import Policy
from webhook.render.core import K8sObject, RenderOptions

NAME = "gpu-admission-policy"


def render(policy: Policy, options: RenderOptions) -> list[K8sObject]:
    if not options.policy_files:
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": options.namespace, "labels": options.labels("policy")},
            "data": dict(options.policy_files),
        }
    ]
