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
    values = [toleration.get("operator") or "Equal" if k == "operator" else toleration.get(k) for k in _TOLERATION_KEYS]
    return tuple(v if isinstance(v, str | None) else repr(v) for v in values)


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
            if _normal(toleration) not in have:
                patch.append((*spec, "tolerations"), dict(toleration))
                have.add(_normal(toleration))
