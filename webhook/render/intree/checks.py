"""The in-tree checks: one entry per conservative part of a rule, the catalogue the VAPs are built from.

A :class:`Check` is data: the rule it belongs to, the message (after ``[rule-id]``), and a function
that writes its violation as a CEL test on one pod template ``t``. Rule-group modules
(``intent``, ``entitlement``, ``placement``, ``devices``, ``scheduling``) register checks here; the
assembler (:mod:`webhook.render.intree.vap`) turns each into one validation per action it can have.

Never stricter than the engine: each check's test holds only where the engine reports a finding of
its rule on the same stored object (same namespace labels, same request). Where the engine's
judgement needs more than CEL sees (other objects, scheduler semantics the expression cannot bound),
the check covers a part and :mod:`webhook.render.intree.explain` says which.

On UPDATE the engine reports only what the update introduces. An *exact* check mirrors the engine's
finding, so the old object's own violation waives the new one; any other check is waived whenever
the old object was GPU-relevant at all (its ``waived`` test), since a partial test on the old object
could miss a finding the engine would then not count as new.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from webhook.policy.compiled import Policy

Test = Callable[[Policy, str], str | None]
Scope = Literal["templates", "stored", "mutated-create", "pod-update"]
Over = Literal["classed", "gpu", "raw", "object", "templates"]


@dataclass(frozen=True)
class Check:
    rule: str
    name: str
    message: str
    test: Test
    """(policy, template variable) -> CEL, true where the template violates; None: nothing to render."""
    scope: Scope = "templates"
    """``templates``: every intercepted kind, CREATE and UPDATE; ``stored``: the kinds the webhook mutates
    (Pods, Jobs, ...), whose templates the engine judges as stored, where a controller's template is
    judged as its pods will be after mutation (a raw request pinned, resources translated);
    ``mutated-create``: the CREATE of such a kind (only there is a placement owed); ``pod-update``: the
    UPDATE of a Pod itself (no subresource), where the test may read ``oldObject``."""
    over: Over = "gpu"
    """Which templates the test is about: ``classed`` (the template's own workload label names a class, not
    the opt-out), ``gpu`` (classed, or holding a GPU resource), ``raw`` (no workload label, a GPU resource);
    each is a variable computed once, so a check costs nothing on an object with no such template;
    ``templates``: every template, GPU or not;
    ``object``: a test on the whole object (``t`` is ``object`` or ``oldObject``) for one class, called as
    ``test(policy, root, class_name)`` once per class of the policy."""
    exact: bool = False
    waived: Test | None = None
    """On UPDATE, a test on the old object's templates that waives the check; default: ``test`` when
    ``exact``, else "the old object was GPU-relevant"."""


CHECKS: list[Check] = []


def check(
    rule: str,
    name: str,
    message: str,
    *,
    over: Over = "gpu",
    scope: Scope = "templates",
    exact: bool = False,
    waived: Test | None = None,
) -> Callable[[Test], Test]:
    def register(test: Test) -> Test:
        CHECKS.append(Check(rule, name, message, test, scope, over, exact, waived))
        return test

    return register


def all_checks() -> list[Check]:
    from webhook.render.intree import devices, entitlement, gang, intent, placement, scheduling  # noqa: F401

    return CHECKS
