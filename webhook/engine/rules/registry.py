"""The rule registry: the check function of each rule in the catalogue (``webhook/policy/rules.yaml``).

Rules are data the way Kyverno and Gatekeeper treat them: the policy may change a rule's action per
namespace or class, or exempt namespaces, without touching code. A check function only *finds*; the
action is decided in one place (``effective_action``), and the policy-wide enforcement mode applied to
it in one place (``violation``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from webhook.actions import enforced
from webhook.engine.model.context import ClaimContext, Context, Finding
from webhook.engine.model.decision import Action, Violation
from webhook.policy.compiled import Policy
from webhook.policy.rule_catalog import catalog

Check = Callable[[Any], Iterable[Finding]]
"""Called with a :class:`Context` (pod templates) or, for rules that judge claim objects, a
:class:`ClaimContext`."""

POD, CLAIM = "pod", "claim"
"""What a rule judges: the pod templates of a workload, or a ResourceClaim(Template) on its own."""


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    default: Action
    catches: str
    check: Check
    needs: frozenset[str] = frozenset()
    """Facts (see :func:`facts`) without which the check cannot find anything; it is not called then."""
    subjects: frozenset[str] = frozenset({POD})
    """What it judges (``POD``, ``CLAIM``): a check of both tells them apart by the context's type."""


RULES: dict[str, Rule] = {}

FACTS = frozenset({"claims", "findings", "gang", "multi-pod", "validated-fields"})


def facts(ctx: Context) -> frozenset[str]:
    """What holds for this evaluation, in the terms rules declare in ``needs``.

    Like a Kyverno rule's ``match``, ``needs`` says which objects a rule is about, so that most
    reviews skip most rules without calling them (a call that finds nothing still costs a generator).
    ``tests/engine/test_rule_needs.py`` checks that skipping never changes a verdict."""
    found = []
    if ctx.findings:
        found.append("findings")
    if ctx.gang is not None:
        found.append("gang")
        if ctx.gang.size > 1:
            found.append("multi-pod")
    if ctx.workload.spec.validate_fields:
        found.append("validated-fields")
    if any(state.judged.claims for state in ctx.states):
        found.append("claims")  # a template as judged names DRA claims (spec.resourceClaims)
    return frozenset(found)


def rule(
    rule_id: str, *, needs: Iterable[str] = (), subjects: Iterable[str] = (POD,)
) -> Callable[[Check], Check]:
    """Register the check of catalogue rule ``rule_id``: its default action and description are the
    catalogue's, so the policy (which reads the catalogue, not this registry) and the engine agree."""
    needed = frozenset(needs)
    judged = frozenset(subjects)
    if not needed <= FACTS:
        raise ValueError(f"rule {rule_id} needs unknown facts {sorted(needed - FACTS)}")
    entry = catalog().get(rule_id)
    if entry is None:
        raise ValueError(f"rule {rule_id} is not in webhook/policy/rules.yaml: add it there first")
    default, catches = entry.default, entry.catches

    def register(check: Check) -> Check:
        if rule_id in RULES:
            raise ValueError(f"rule {rule_id} registered twice")
        RULES[rule_id] = Rule(rule_id, default, catches, check, needed, judged)
        return check

    return register


def effective_action(
    policy: Policy, rule_id: str, namespace_labels: dict[str, str], class_name: str | None
) -> Action:
    """Exemption > namespace override (first match) > class override > policy default > built-in default."""
    base = RULES[rule_id].default
    settings = policy.rules.get(rule_id)
    if settings is None:
        return base
    for selector in settings.exempt:
        if selector.matches(namespace_labels):
            return Action.OFF
    for override in settings.namespaces:
        if override.selector.matches(namespace_labels):
            return override.action
    if class_name is not None and class_name in settings.classes:
        return settings.classes[class_name]
    return settings.action or base


def violation(
    policy: Policy, rule_id: str, action: Action, path: str, message: str, exception: str | None = None
) -> Violation:
    """A finding's violation under the policy's enforcement mode (``settings.enforcement``): ``warn`` and
    ``audit`` admit what the rule would deny, marked ``would_deny`` so that every surface (warnings, audit
    annotations, metrics, ``check``, ``audit``) still says it; ``enforce`` leaves the action as it is."""
    final = enforced(action, policy.settings.enforcement)
    return Violation(rule_id, final, path, message, exception, would_deny=final is not action)


def is_claim(ctx: Context | ClaimContext) -> bool:
    return isinstance(ctx, ClaimContext)


def resolution_findings(ctx: Context, rule_id: str) -> Iterable[Finding]:
    """Findings recorded while reading intent and resolving pools, for the rule that owns them."""
    return [f for f in ctx.findings if f.rule == rule_id] if ctx.findings else ()
