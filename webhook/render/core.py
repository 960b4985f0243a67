"""The renderer registry and the options every renderer reads.

Order of :data:`RENDERERS` is the order of the output: objects others depend on first (the policy
ConfigMap the server mounts, the PriorityClasses pods name), the webhook configurations last, so that
``kubectl apply -f`` of the output never turns interception on before what it relies on exists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.policy.compiled import Policy

K8sObject = dict[str, Any]


@dataclass(frozen=True)
class RenderOptions:
    """Where the webhook is installed and what the cluster around it looks like.

    Defaults are the shipped manifests' (namespace and Service ``gpu-admission``).
    """

    namespace: str = "gpu-admission"
    service: str = "gpu-admission"
    app: str = "gpu-admission"
    mutating_name: str = "gpu-admission-mutating"
    validating_name: str = "gpu-admission-validating"
    webhook_port: int = 8443
    metrics_port: int = 9102
    # (file name, text) of every policy file, for the ConfigMap the server mounts; empty: no ConfigMap
    policy_files: tuple[tuple[str, str], ...] = ()
    # namespaces that get per-namespace objects (e.g. the platform's ResourceClaimTemplates)
    namespaces: tuple[str, ...] = ()
    # labels of namespaces known from Namespace objects (--context): entitlement is judged from them
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # extended resources the cluster's DeviceClass objects serve (spec.extendedResourceName, from
    # --cluster-objects): the webhooks' matchConditions forward pods asking for them
    mapped_resources: tuple[str, ...] = ()
    # the API server's addresses, the only sources admitted to the webhook port (and, with the
    # monitoring namespace, to the metrics port). None given: where the API server lives is
    # cluster-specific (outside the pod network on managed clusters), so the webhook port stays open
    # to any address (ANY_ADDRESS; the render says so) while the metrics port never is.
    control_plane_cidrs: tuple[str, ...] = ()
    # namespace whose pods (Prometheus) may scrape the metrics port; "" for none
    monitoring_namespace: str = "monitoring"
    # "webhook": the validating webhook fails closed (an outage blocks GPU workloads); "in-tree": it
    # fails open and the in-tree policies (`policy render --in-tree`) hold what they can meanwhile
    availability: str = "webhook"
    # the cluster's Kubernetes version (major, minor): MutatingAdmissionPolicies from 1.36
    kube_version: tuple[int, int] = (1, 30)
    # emit the MutatingAdmissionPolicies where the cluster serves them (settings.inTree.mutating)
    mutating: bool = True

    def labels(self, component: str) -> dict[str, str]:
        return {"app.kubernetes.io/name": self.app, "app.kubernetes.io/component": component}


def parse_kube_version(text: str) -> tuple[int, int] | None:
    """``1.36``, ``v1.36`` or ``1.36.2`` -> (1, 36); None when it is not a version."""
    major, _, minor = text.removeprefix("v").partition(".")
    minor = minor.split(".")[0]
    if not (major.isascii() and major.isdigit() and minor.isascii() and minor.isdigit()):
        return None
    return int(major), int(minor)


@dataclass(frozen=True)
class InTreeChoice:
    """The in-tree render chosen for a cluster: ``settings.inTree`` of the policy, each field overridden by
    its flag when one was given (None: not given), so a render reproduces what the policy records."""

    kube_version: tuple[int, int]
    mutating: bool
    availability: str


def in_tree_choice(
    policy: Policy,
    *,
    kube_version: tuple[int, int] | None = None,
    mutating: bool | None = None,
    availability: str | None = None,
) -> InTreeChoice:
    setting = policy.settings.in_tree
    version = kube_version
    if version is None and setting.kube_version is not None:
        version = parse_kube_version(setting.kube_version)  # the schema's pattern makes it parse
    return InTreeChoice(
        version or (1, 30),
        setting.mutating if mutating is None else mutating,
        setting.availability if availability is None else availability,
    )


Renderer = Callable[[Policy, RenderOptions], list[K8sObject]]


def _renderers() -> list[tuple[str, Renderer]]:
    from webhook.render import claimtemplates, configmap, label_guard, networkpolicy, priorityclasses, webhooks

    return [
        ("policy-configmap", configmap.render),
        ("priority-classes", priorityclasses.render),
        ("claim-templates", claimtemplates.render),
        ("network-policy", networkpolicy.render),
        ("namespace-label-guard", label_guard.render),
        ("mutating-webhook", webhooks.render_mutating),
        ("validating-webhook", webhooks.render_validating),
    ]


# name -> renderer, in output order; a new object kind is one module and one entry here
RENDERERS: list[tuple[str, Renderer]] = _renderers()


def render(policy: Policy, options: RenderOptions | None = None) -> list[K8sObject]:
    """Every object the policy depends on, in apply order; raises
    :class:`~webhook.render.intree.runtimecost.TooLarge` rather than emit CEL past the apiserver's limits."""
    options = options or RenderOptions()
    from webhook.render.intree import runtimecost

    out: list[K8sObject] = []
    for _name, renderer in RENDERERS:
        out.extend(renderer(policy, options))
    # the webhooks' matchConditions and the label guard run CEL too: refuse what the apiserver would reject
    # or could not evaluate on an object within the documented bounds (it would deny that object unjudged)
    runtimecost.check(out, in_tree=False)
    return out
