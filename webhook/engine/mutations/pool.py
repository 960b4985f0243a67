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


_POOL_FORMS: dict[int, tuple[tuple[dict[str, object], ...], tuple[tuple, ...], frozenset[tuple]]] = {}


def _cached_forms(tolerations: tuple[dict[str, object], ...]) -> tuple[tuple[tuple, ...], frozenset[tuple]]:
    """The normal forms of a compiled pool's tolerations (in order, and as a set), computed once per
    policy, not per review.

    Keyed by the identity of the (immutable, policy-owned) tuple and checked against it, so a policy
    reload that frees the old tuple can never hand its forms to a new one; bounded by clearing."""
    entry = _POOL_FORMS.get(id(tolerations))
    if entry is not None and entry[0] is tolerations:
        return entry[1], entry[2]
    ordered = tuple(_normal(t) for t in tolerations)
    if len(_POOL_FORMS) > 256:
        _POOL_FORMS.clear()
    _POOL_FORMS[id(tolerations)] = (tolerations, ordered, frozenset(ordered))
    return ordered, frozenset(ordered)


def pool_forms(tolerations: tuple[dict[str, object], ...]) -> frozenset[tuple]:
    """The set of normal forms of a pool's tolerations (see :func:`_cached_forms`)."""
    return _cached_forms(tolerations)[1]


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
        for toleration, form in zip(res.pool.tolerations, _cached_forms(res.pool.tolerations)[0], strict=True):
            if form not in have:
                missing.append(dict(toleration))
                have.add(form)
        patch.extend((*spec, "tolerations"), missing)
