"""A NetworkPolicy that lets only the API server reach the webhook, and only scrapers the metrics.

Without the API server's addresses (``--control-plane-cidr``) the webhook port admits any address
(the render says so), but the metrics port never does: only the monitoring namespace's pods and the
CIDRs given reach it.

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


ANY_ADDRESS = ("0.0.0.0/0", "::/0")


def open_webhook_port_note(options: RenderOptions) -> str | None:
    """What the render says when no control-plane CIDR is given (None when one is)."""
    if options.control_plane_cidrs:
        return None
    return (
        f"no --control-plane-cidr given: the NetworkPolicy admits any address to the webhook port "
        f"{options.webhook_port} (the API server's addresses are cluster-specific); the metrics port "
        f"{options.metrics_port} admits only namespace {options.monitoring_namespace!r}"
        if options.monitoring_namespace
        else f"no --control-plane-cidr given: the NetworkPolicy admits any address to the webhook port "
        f"{options.webhook_port} (the API server's addresses are cluster-specific); the metrics port "
        f"{options.metrics_port} admits nothing"
    ) + "; pass --control-plane-cidr CIDR (repeatable) to narrow the webhook port"


def render(policy: Policy, options: RenderOptions) -> list[K8sObject]:
    given: list[dict[str, Any]] = [{"ipBlock": {"cidr": cidr}} for cidr in options.control_plane_cidrs]
    control_plane = given or [{"ipBlock": {"cidr": cidr}} for cidr in ANY_ADDRESS]
    metrics_from = list(given)  # never every address: only the CIDRs given and the monitoring namespace
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
