"""A NetworkPolicy that lets only the API server reach the webhook, and only scrapers the metrics.

The API server calls the webhook through the Service (port 443 -> container 8443) and proxies the
documented ``kubectl get --raw …/pods/<pod>:9102/proxy/metrics``; Prometheus in the monitoring
namespace scrapes 9102 directly. Nothing else may connect: admission reviews have no side effects,
but a pod flooding the webhook would slow every GPU pod creation in the cluster.
"""

from __future__ import annotations

from typing import Any

from webhook.policy.compiled import Policy
from webhook.render.core import K8sObject, RenderOptions

NAME = "gpu-admission-ingress"


def render(policy: Policy, options: RenderOptions) -> list[K8sObject]:
    control_plane: list[dict[str, Any]] = [{"ipBlock": {"cidr": cidr}} for cidr in options.control_plane_cidrs]
    metrics_from = list(control_plane)
    if options.monitoring_namespace:
        metrics_from.append(
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": options.monitoring_namespace}}}
        )
    ingress: list[dict[str, Any]] = [
        {"from": control_plane, "ports": [{"protocol": "TCP", "port": options.webhook_port}]},
    ]
    if metrics_from:
        ingress.append({"from": metrics_from, "ports": [{"protocol": "TCP", "port": options.metrics_port}]})
    return [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": NAME, "namespace": options.namespace, "labels": options.labels("webhook")},
            "spec": {
                "podSelector": {"matchLabels": options.labels("webhook")},
                "policyTypes": ["Ingress"],
                "ingress": ingress,
            },
        }
    ]
