"""``placement-missing`` and ``node-name-set`` in-tree.

``placement-missing`` is what makes a fail-open mutating webhook safe: a class pod (or Job, Volcano
Job, mutated operator kind) created while the webhook was down, timed out or was undone by a later
webhook lacks its pool's nodeSelector, and is denied with "webhook unavailable, retry" instead of
being scheduled wherever its tolerations and selectors let it. The test is conservative: the
template is unplaced for *every* pool its class may resolve to (a class with a pool that sets no labels
is left to the webhook), and it holds only where every rule a failed resolution reports under denies,
so that a template the engine cannot resolve is still one it denies. Unplaced for a pool is any of what
the engine requires of the resolved pool: its nodeSelector lacks a label of the pool; a toleration of
the pool is not there as the mutation writes it (the engine's normal form: key, operator with Equal
for empty, value, effect); or, for a device-plugin pool, no regular container names any GPU resource
in its limits (the resolution always writes one into the GPU container; DRA pools write a claim, left
to the webhook). A placement written in part by hand is as unplaced as none at all.
"""

from __future__ import annotations

from webhook.engine.model.reach import toleration_forms
from webhook.policy.compiled import CompiledPool, Policy
from webhook.render.intree.cel import cel_list, class_of, key_is, resolution_denies
from webhook.render.intree.checks import check
from webhook.render.intree.entitlement import _selects, _spelled
from webhook.render.webhooks import cel_string


@check(
    "placement-missing",
    "unplaced-class-pod",
    "gpu-admission webhook unavailable, retry: the class pod was stored without its GPU pool's nodeSelector "
    "(the mutating webhook did not run); create it again",
    over="classed",
    scope="mutated-create",
)
def unplaced(policy: Policy, t: str) -> str | None:
    per_class = []
    for name, cls in policy.classes.items():
        pools = [policy.pools[p] for p in cls.pools if p in policy.pools]
        if not pools or any(not p.spec.node_selector for p in pools):
            continue
        lacking = " && ".join(_unplaced(policy, p, t) for p in pools)
        per_class.append(f"({class_of(policy, t)} == {cel_string(name)} &&\n  {lacking})")
    if not per_class:
        return None
    return (
        f"(has({t}.spec) && ({resolution_denies(policy, class_of(policy, t))}) && (\n  "
        + " ||\n  ".join(per_class)
        + "))"
    )


def _unplaced(policy: Policy, pool: CompiledPool, t: str) -> str:
    """Template ``t`` lacks part of what the mutation writes for ``pool``: a label, a toleration, devices."""
    parts = [f"!({_selects(pool, t)})"]
    for form in dict.fromkeys(toleration_forms(policy, pool)):
        if all(type(v) in (str, type(None)) for v in form):
            parts.append(f"!(has({t}.spec.tolerations) && {t}.spec.tolerations.exists(x, {_spelled(form)}))")
    if pool.spec.dra is None:
        names = " || ".join(
            [f"k.startsWith({cel_string(p)})" for p in policy.gpu_prefixes] + [f"k in {cel_list(sorted(pool.offers))}"]
        )
        parts.append(
            f"!(has({t}.spec.containers) && {t}.spec.containers.exists(c, has(c.resources) &&\n"
            f"    has(c.resources.limits) && c.resources.limits.exists(k, {key_is(names, long=True)})))"
        )
    return "(" + " ||\n    ".join(parts) + ")"


def _node_name(t: str) -> str:
    return f"(has({t}.spec) && has({t}.spec.nodeName) && {t}.spec.nodeName != '')"


@check(
    "node-name-set",
    "node-name",
    "spec.nodeName on a GPU pod bypasses the scheduler (no gang, topology or quota); remove it and let the "
    "pool's nodeSelector place the pod",
    waived=lambda policy, t: _node_name(t),
)
def node_name(policy: Policy, t: str) -> str:
    return _node_name(t)
