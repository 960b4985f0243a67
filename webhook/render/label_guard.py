"""A ValidatingAdmissionPolicy that keeps the namespace labels the policy trusts in the platform's hands.

Entitlements, exemptions and per-namespace rule actions select namespaces by label, so a namespace's
labels decide which GPU classes and pools its pods may use. Whoever may label a namespace could
otherwise grant it training, or (with the shipped default, which restricts labelled namespaces)
remove the label that restricts it. This policy lets only members of ``settings.platformGroup``
(and ``system:masters``, the break-glass identity) set, change or remove those labels, at CREATE
(a namespace created with them) and UPDATE (``kubectl label``, apply, the ``status`` and
``finalize`` subresources, which carry the whole Namespace). Everyone keeps every other label, and
updates that leave the guarded labels as they were are never denied (the namespace controller's
finalize of a terminating namespace, an unrelated label change).

The guarded keys are computed from the policy: every ``matchLabels`` key and ``matchExpressions``
key any selector uses. ``kubernetes.io/metadata.name`` is left out: the apiserver sets it to the
namespace's name on every namespace and no one can change it, so guarding it would only deny every
namespace creation. A policy that selects on no other label renders no guard.

It is a ValidatingAdmissionPolicy (CEL in the apiserver) rather than a rule of the webhook: it needs
no webhook call, keeps working while the webhook is down, and does not widen what the webhook
intercepts. Expressions are written for cel-go's type checker: every optional field is ``has()``
guarded, ``oldObject`` is read only on UPDATE (it is null on CREATE).
"""

from __future__ import annotations

from collections.abc import Iterable

from webhook.policy.compiled import Policy
from webhook.policy.model import LabelSelector
from webhook.render.core import K8sObject, RenderOptions
from webhook.render.webhooks import cel_string

NAME = "gpu-admission-namespace-labels"
BREAK_GLASS_GROUP = "system:masters"
NAME_LABEL = "kubernetes.io/metadata.name"  # set by the apiserver to the namespace's name, immutable


def _selectors(policy: Policy) -> Iterable[LabelSelector]:
    spec = policy.spec
    for entitlement in spec.namespaces:
        yield entitlement.selector
    for settings in spec.rules.values():
        for per_namespace in settings.namespaces:
            yield per_namespace.selector
        yield from settings.exempt


def guarded_labels(policy: Policy) -> tuple[str, ...]:
    """Every namespace label key the policy's selectors read, sorted; the name label excepted."""
    keys: set[str] = set()
    for selector in _selectors(policy):
        keys.update(selector.match_labels)
        keys.update(req.key for req in selector.match_expressions)
    keys.discard(NAME_LABEL)
    return tuple(sorted(keys))


def allowed_groups(policy: Policy) -> tuple[str, ...]:
    return tuple(dict.fromkeys((policy.settings.platform_group, BREAK_GLASS_GROUP)))


def _cel_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(cel_string(v) for v in values) + "]"


def render(policy: Policy, options: RenderOptions) -> list[K8sObject]:
    keys = guarded_labels(policy)
    if not keys:
        return []
    groups = allowed_groups(policy)
    group = policy.settings.platform_group
    who = cel_string(f" only members of group {group} may set, change or remove it")
    labels = {"app.kubernetes.io/name": options.app, "app.kubernetes.io/component": "namespace-labels"}
    variables = [
        {"name": "guarded", "expression": _cel_list(keys)},
        {"name": "labels", "expression": "has(object.metadata.labels) ? object.metadata.labels : {}"},
        {
            "name": "oldLabels",
            "expression": "request.operation == 'UPDATE' && has(oldObject.metadata.labels) ?\n"
            "  oldObject.metadata.labels : {}",
        },
        {
            # guarded keys added, removed or given another value by this request
            "name": "changed",
            "expression": "variables.guarded.filter(k,\n"
            "  (k in variables.labels) != (k in variables.oldLabels) ||\n"
            "  (k in variables.labels && variables.labels[k] != variables.oldLabels[k]))",
        },
        {
            "name": "platform",
            "expression": "has(request.userInfo) && has(request.userInfo.groups) &&\n"
            f"  request.userInfo.groups.exists(g, g in {_cel_list(groups)})",
        },
    ]
    message = (
        f"namespace labels {', '.join(keys)} grant GPU classes and exemptions (gpu-admission); only members "
        f"of group {group} may set, change or remove them"
    )
    policy_obj: K8sObject = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NAME, "labels": labels},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["namespaces", "namespaces/status", "namespaces/finalize"],
                    }
                ]
            },
            "variables": variables,
            "validations": [
                {
                    "expression": "size(variables.changed) == 0 || variables.platform",
                    "messageExpression": "'namespace label ' + variables.changed[0] +\n"
                    "  (size(variables.changed) > 1 ?\n"
                    "    ' (and ' + string(size(variables.changed) - 1) + ' more guarded label(s))' : '') +\n"
                    "  ' grants GPU classes or exemptions (gpu-admission policy);' +\n"
                    f"  {who} +\n"
                    "  ' (ask the platform team)'",
                    "message": message,
                    "reason": "Forbidden",
                }
            ],
        },
    }
    binding: K8sObject = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": NAME, "labels": labels},
        "spec": {"policyName": NAME, "validationActions": ["Deny"]},
    }
    return [policy_obj, binding]
