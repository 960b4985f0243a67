"""A GPU object in a namespace whose labels cannot be known: denied, never judged by the catch-all.

The decision says so (``Decision.namespace_unknown``): the server first marks a namespace its cache
lacks as unknown, without any I/O, and looks it up only when the engine answers here, so that only
objects that are the webhook's business cost an apiserver GET.

Entitlements select namespaces by label and the last one usually has an empty selector (everyone
else). Judging a namespace the webhook could not find as if it had no labels would hand it that
catch-all entitlement, and with a policy that restricts labelled namespaces (the shipped default:
``gpu-admission.io/tier: serving`` may not train), a namespace the cache has not seen yet would get
more than its labels grant. So the edge looks the namespace up (the server: one GET after a cache
miss) and, when it stays unknown, says so through :attr:`Cluster.unknown_namespaces`; the engine then
answers here, before resolution or mutation:

* ``/mutate`` (``validate=False``): no patch. The object is judged again at ``/validate``.
* ``/validate``: ``class-not-allowed`` at ``metadata.namespace``, saying to retry (the usual cause is
  a namespace created a moment before its first pod, or the apiserver being unreachable).

Its action is the rule's action for the object's class (``spec.rules.class-not-allowed.classes``) or
global action: per-namespace overrides and exemptions select on labels this namespace does not have
here, so none of them applies, which is also why an exemption cannot turn it off.
"""

from __future__ import annotations

from typing import Any

from webhook.engine.model.context import TemplateState
from webhook.engine.model.decision import Action, Decision, Violation
from webhook.engine.rules import RULES, violation
from webhook.policy.compiled import Policy

RULE = "class-not-allowed"


def action(policy: Policy, class_name: str | None) -> Action:
    """The rule's action with no namespace labels to select on: class override, else global, else default."""
    settings = policy.rules.get(RULE)
    if settings is None:
        return RULES[RULE].default
    if class_name is not None and class_name in settings.classes:
        return settings.classes[class_name]
    return settings.action or RULES[RULE].default


def message(namespace: str) -> str:
    return (
        f"namespace {namespace} unknown, retry: gpu-admission could not read its labels (not in its cache, "
        "and looking it up found nothing or failed), so it cannot tell which GPU classes the namespace is "
        "entitled to; retry in a few seconds, and if it persists ask the platform team to check the "
        "webhook's namespace watch and its RBAC (get, list, watch on namespaces)"
    )


def decide(
    policy: Policy,
    obj: dict[str, Any],
    *,
    kind: str,
    name: str,
    operation: str,
    namespace: str,
    states: list[TemplateState],
    validate: bool,
    explain: bool,
) -> Decision:
    class_name = next((s.class_name for s in states if s.class_name), None)
    act = action(policy, class_name)
    violations: tuple[Violation, ...] = ()
    if validate and act is not Action.OFF:
        violations = (violation(policy, RULE, act, "metadata.namespace", message(namespace)),)
    explanation = (
        (f"namespace {namespace}: unknown (looked up, not found): no entitlement, no mutation",) if explain else ()
    )
    return Decision(
        kind=kind,
        name=name,
        operation=operation,
        violations=violations,
        explanation=explanation,
        mutated=obj,
        relevant=True,
        namespace_unknown=True,
    )
