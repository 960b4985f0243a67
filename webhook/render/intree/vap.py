"""Assemble the in-tree ValidatingAdmissionPolicies and their bindings from the check catalogue.

One policy per action a check can have under this policy (``deny`` -> binding ``Deny``, or ``Warn`` and
``Audit`` / ``Audit`` under ``settings.enforcement: warn`` / ``audit``; ``warn`` -> ``Warn``, ``audit`` ->
``Audit``), each with one validation per check: a rule whose action differs per
namespace or class appears in several, its CEL picking the namespaces and classes of each. The
policies match what the validating webhook intercepts (same resources and operations, same
namespaceSelector, same matchConditions), so they judge exactly the objects the webhook judges and
never an object it would not see.

Order of evaluation in the apiserver (documented for VAP): match constraints and binding, match
conditions, then variables lazily, then validations; an expression that errors is a failure that
``failurePolicy: Fail`` turns into the binding's action. Every read is guarded so none errors.
"""

from __future__ import annotations

from typing import Any

from webhook.engine.rules.registry import RULES
from webhook.policy.compiled import Policy
from webhook.render.core import K8sObject, RenderOptions
from webhook.render.intree.cel import (
    ENTITLEMENT,
    action_is,
    any_gpu_key,
    cel_list,
    class_of,
    entitled_classes,
    entitled_pools,
    entitlement_index,
    gpu_held,
    indent,
    label_present,
    namespace_action,
    ns_variable,
    rule_actions,
    templates_of,
)
from webhook.render.intree.checks import Check, all_checks
from webhook.render.intree.intent import declares
from webhook.render.webhooks import cel_string, intercepted, match_conditions

IN_TREE_LABEL = "gpu-admission.io/in-tree"
ACTIONS = {"deny": "Deny", "warn": "Warn", "audit": "Audit"}
NAME = "gpu-admission-in-tree"


def policy_name(action: str) -> str:
    return f"{NAME}-{action}"


def labels(options: RenderOptions) -> dict[str, str]:
    return {**options.labels("in-tree"), IN_TREE_LABEL: "true"}


def resource_rules(policy: Policy) -> list[dict[str, Any]]:
    """The validating webhook's resources and operations (subresources included: pods/ephemeralcontainers),
    except ``*/scale``: a Scale carries only a count, and judging it needs the object it scales, which only
    the webhook reads."""
    grouped: dict[tuple[str, str, tuple[str, ...]], list[str]] = {}
    for entry in intercepted(policy):
        if entry.validate and not entry.resource.endswith("/scale"):
            grouped.setdefault((entry.group, entry.version, entry.validate), []).append(entry.resource)
    return [
        {"apiGroups": [g], "apiVersions": [v], "operations": list(ops), "resources": res, "scope": "Namespaced"}
        for (g, v, ops), res in grouped.items()
    ]


def _mutated(policy: Policy) -> list[str]:
    """group/resource of every kind the webhook mutates: its templates are judged as stored."""
    return sorted({f"{e.group}/{e.resource}" for e in intercepted(policy) if e.mutate})


def variables(policy: Policy, checks: list[Check]) -> list[dict[str, str]]:
    out = [
        {
            "name": "nsLabels",
            "expression": "namespaceObject == null || !has(namespaceObject.metadata) ||\n"
            "  !has(namespaceObject.metadata.labels) ? {} : namespaceObject.metadata.labels",
        },
        {"name": "entitlement", "expression": entitlement_index(policy)},
        {"name": "entitledClasses", "expression": entitled_classes(policy)},
        {"name": "entitledPools", "expression": entitled_pools(policy)},
        {
            "name": "stored",
            "expression": f"(request.resource.group + '/' + request.resource.resource) in\n"
            f"  {cel_list(_mutated(policy))}",
        },
        {"name": "templates", "expression": templates_of(policy, "object")},
        {"name": "classed", "expression": f"variables.templates.filter(t, {declares(policy, 't')})"},
        {
            "name": "gpu",
            "expression": f"variables.templates.filter(t,\n  {declares(policy, 't')} ||\n  {gpu_held(policy, 't')})",
        },
        # raw: no class declared (no workload label, or the opt-out): a raw request to the engine
        {"name": "raw", "expression": f"variables.gpu.filter(t, !{declares(policy, 't')})"},
        {
            "name": "oldTemplates",
            "expression": "request.operation != 'UPDATE' ? [] :\n" + templates_of(policy, "oldObject"),
        },
    ]
    for rule_id in sorted(RULES):  # every rule a check's action test may name (lazy: unread ones cost nothing)
        ns = namespace_action(policy, rule_id)
        if ns is not None:
            out.append({"name": ns_variable(rule_id), "expression": ns})
    return out


def _differs(field: str) -> str:
    return (
        f"has(object.spec.{field}) != has(oldObject.spec.{field}) ||\n"
        f"    (has(object.spec.{field}) && object.spec.{field} != oldObject.spec.{field})"
    )


REACH_CHANGED = (
    "(request.operation == 'UPDATE' && request.resource.group == '' && request.resource.resource == 'pods' &&\n"
    "  !(object == null) && !(oldObject == null) && has(object.spec) && has(oldObject.spec) && (\n  "
    + " ||\n  ".join(_differs(f) for f in ("tolerations", "nodeSelector", "affinity"))
    + "))"
)
"""A Pod UPDATE that changes what the pod can reach (tolerations on any pod; nodeSelector and affinity
while it is scheduling-gated): judged whatever the pod holds (a CPU pod can gain a GPU pool)."""


def conditions(policy: Policy) -> list[dict[str, str]]:
    """The validating webhook's match conditions, with ``gpu-relevant`` narrowed to what the in-tree
    checks judge (a template with the workload label, or a GPU resource, or a Pod UPDATE that changes
    its reach): every object matched here is one the webhook judges too, and the narrower test stays
    cheap (the webhook's own also reads DRA claims and device-access triggers of CPU-only pods, which
    no in-tree check is about)."""
    out = []
    for cond in match_conditions(policy, "validating"):
        if cond["name"] == "gpu-relevant":
            tpl = templates_of(policy, "object")
            cond = {"name": "in-tree-relevant", "expression": f"({tpl}).exists(t,\n  "
                    f"({label_present(policy, 't')}) ||\n  {any_gpu_key(policy, 't')}) ||\n{REACH_CHANGED}"}
        out.append(cond)
    return out


def _scope(check: Check) -> str:
    if check.scope == "stored":
        return "variables.stored && "
    if check.scope == "mutated-create":
        # an empty subResource is omitted from ``request`` (omitempty): has() or the test errors
        return (
            "variables.stored && request.operation == 'CREATE' &&\n"
            "  (!has(request.subResource) || request.subResource == '') && "
        )
    if check.scope == "pod-update":
        return (
            "request.resource.group == '' && request.resource.resource == 'pods' &&\n"
            "  request.operation == 'UPDATE' && !(oldObject == null) &&\n"
            "  (!has(request.subResource) || request.subResource == '') && "
        )
    return ""


def _object_validation(policy: Policy, check: Check, action: str) -> dict[str, str] | None:
    """A whole-object check: one test per class, each under that class's action."""
    tests, olds = [], []
    for cls in policy.classes:
        test = check.test(policy, "object", cls)  # type: ignore[call-arg]
        when = action_is(policy, check.rule, action, cel_string(cls))
        if test is None or when == "false":
            continue
        tests.append(test if when == "true" else f"({when}) && {test}")
        olds.append(check.test(policy, "oldObject", cls))  # type: ignore[call-arg]
    if not tests:
        return None
    expression = f"!({_scope(check)}(\n  " + " ||\n  ".join(tests) + "))"
    expression += " ||\n(request.operation == 'UPDATE' && !(oldObject == null) && (\n  " + " ||\n  ".join(olds) + "))"
    return {"expression": expression, "message": f"[{check.rule}] {check.message}", "reason": "Forbidden"}


def validation(policy: Policy, check: Check, action: str) -> dict[str, str] | None:
    if check.over == "object":
        return _object_validation(policy, check, action)
    test = check.test(policy, "t")
    if test is None:
        return None
    when = action_is(policy, check.rule, action, class_of(policy, "t"))
    if when == "false":
        return None
    guarded = test if when == "true" else f"({when}) &&\n  {test}"
    if check.waived is not None:
        waived = check.waived(policy, "t")
    elif check.exact:
        waived = test
    else:
        waived = f"({declares(policy, 't')} || {any_gpu_key(policy, 't')})"
    expression = f"!({_scope(check)}variables.{check.over}.exists(t,\n  {indent(guarded)}))"
    if check.scope not in ("mutated-create", "pod-update"):  # pod-update: the test reads the old pod itself
        expression += f" ||\nvariables.oldTemplates.exists(t,\n  {indent(waived)})"
    return {"expression": expression, "message": f"[{check.rule}] {check.message}", "reason": "Forbidden"}


def binding_actions(policy: Policy, action: str) -> list[str]:
    """The binding's ``validationActions`` for the policy of ``action`` under ``settings.enforcement``: the
    deny policy binds ``Deny`` under enforce, ``Warn`` and ``Audit`` under warn (the webhook's warnings
    land in the audit log too), ``Audit`` under audit; the warn and audit policies bind as their names say."""
    mode = policy.settings.enforcement
    if action != "deny" or mode == "enforce":
        return [ACTIONS[action]]
    return ["Warn", "Audit"] if mode == "warn" else ["Audit"]


def owed_placement(policy: Policy) -> bool:
    """A CREATE owes the placement our patch gives, unless mutation is off under an observe mode: the
    webhook then judges a CREATE as its patch would have left it, and so must the in-tree policy (under
    enforce an unplaced pod is refused either way)."""
    return policy.settings.mutation == "apply" or policy.settings.enforcement == "enforce"


def render(policy: Policy, options: RenderOptions) -> list[K8sObject]:
    checks = [c for c in all_checks() if c.scope != "mutated-create" or owed_placement(policy)]
    rendered: dict[str, list[dict[str, str]]] = {}
    for action in ACTIONS:
        for c in checks:
            if action not in rule_actions(policy, c.rule):
                continue
            v = validation(policy, c, action)
            if v is not None:
                rendered.setdefault(action, []).append(v)
    out: list[K8sObject] = []
    namespaces = list(dict.fromkeys(("kube-system", options.namespace)))
    for action, validations in rendered.items():
        name = policy_name(action)
        used = [c for c in checks if action in rule_actions(policy, c.rule)]
        out.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": name, "labels": labels(options)},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {
                        "matchPolicy": "Equivalent",
                        "namespaceSelector": {
                            "matchExpressions": [
                                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": namespaces}
                            ]
                        },
                        "resourceRules": resource_rules(policy),
                    },
                    "matchConditions": conditions(policy),
                    "variables": variables(policy, used),
                    "validations": validations,
                },
            }
        )
        out.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": name, "labels": labels(options)},
                "spec": {"policyName": name, "validationActions": binding_actions(policy, action)},
            }
        )
    return out


__all__ = ["ENTITLEMENT", "IN_TREE_LABEL", "render", "resource_rules"]
