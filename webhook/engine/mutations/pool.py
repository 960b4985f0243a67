"""The pool step: the pool's nodeSelector and tolerations, merged into the user's.

A user value that conflicts with the pool never reaches this step: resolution skips such pools and
the request is denied (``pool-spoofing``) rather than silently overwritten.
"""

from __future__ import annotations

from webhook.engine.context import Context, TemplateState
from webhook.engine.patch import PatchBuilder
from webhook.policy.compiled import CompiledPool, Policy

_TOLERATION_KEYS = ("key", "operator", "value", "effect")


def _normal(toleration: object) -> tuple:
    """Comparable form of a toleration (operator defaults to Equal); non-scalar values never match."""
    if not isinstance(toleration, dict):
        return ()
    values = (
        toleration.get("key"),
        toleration.get("operator") or "Equal",
        toleration.get("value"),
        toleration.get("effect"),
    )
    for v in values:
        if v is not None and type(v) is not str:
            return tuple(v if isinstance(v, str | None) else repr(v) for v in values)
    return values


def toleration_forms(policy: Policy, pool: CompiledPool) -> tuple[tuple, ...]:
    """The normal forms of a pool's tolerations, in order; computed once per policy, not per review."""
    return policy.recall(("forms", pool.name), lambda: tuple(_normal(t) for t in pool.tolerations))


def apply(ctx: Context, state: TemplateState, patch: PatchBuilder) -> None:
    res = state.resolution
    if res is None:
        return
    spec = state.tpl.spec_path
    selector = patch.get((*spec, "nodeSelector"))
    selector = selector if isinstance(selector, dict) else {}
    for key, value in res.node_selector.items():
        if key not in selector:  # a present key is the user's (resolution skipped conflicting pools)
            patch.set((*spec, "nodeSelector", key), value)
    if res.pool.tolerations:
        existing = patch.get((*spec, "tolerations"))
        have = {_normal(t) for t in existing} if isinstance(existing, list) else set()
        missing = []
        for toleration, form in zip(res.pool.tolerations, toleration_forms(ctx.policy, res.pool), strict=True):
            if form not in have:
                missing.append(dict(toleration))
                have.add(form)
        patch.extend((*spec, "tolerations"), missing)
