"""SPEC §3 row 'pool': the pool's nodeSelector and tolerations, merged into the user's.

A user value that conflicts with the pool never reaches this step: resolution skips such pools and
the request is denied (``pool-spoofing``) rather than silently overwritten.
"""

from __future__ import annotations

from webhook.engine.context import Context, TemplateState
from webhook.engine.patch import PatchBuilder

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


_POOL_FORMS: dict[int, tuple[tuple[dict[str, object], ...], frozenset[tuple]]] = {}


def pool_forms(tolerations: tuple[dict[str, object], ...]) -> frozenset[tuple]:
    """The normal forms of a compiled pool's tolerations, computed once per policy, not per review.

    Keyed by the identity of the (immutable, policy-owned) tuple and checked against it, so a policy
    reload that frees the old tuple can never hand its forms to a new one; bounded by clearing."""
    entry = _POOL_FORMS.get(id(tolerations))
    if entry is not None and entry[0] is tolerations:
        return entry[1]
    forms = frozenset(_normal(t) for t in tolerations)
    if len(_POOL_FORMS) > 256:
        _POOL_FORMS.clear()
    _POOL_FORMS[id(tolerations)] = (tolerations, forms)
    return forms


def apply(ctx: Context, state: TemplateState, patch: PatchBuilder) -> None:
    res = state.resolution
    if res is None:
        return
    spec = state.tpl.spec_path
    for key, value in res.node_selector.items():
        patch.set((*spec, "nodeSelector", key), value)
    if res.pool.tolerations:
        existing = patch.get((*spec, "tolerations"))
        have = {_normal(t) for t in existing} if isinstance(existing, list) else set()
        for toleration in res.pool.tolerations:
            form = _normal(toleration)
            if form not in have:
                patch.append((*spec, "tolerations"), dict(toleration))
                have.add(form)
