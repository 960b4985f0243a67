"""The pool's nodeSelector and tolerations, merged into the user's: for class pods (their resolved
pool) and for raw GPU requests (pinned to an entitled pool, as Kubernetes' PodNodeSelector pins a
namespace's pods).

A user value that conflicts with the pool never reaches this step: resolution skips such pools and
the request is denied (``pool-spoofing``) rather than silently overwritten.

Raw requests (GPU resources, no workload class) with ``settings.rawRequests: pin`` are pinned to ONE
pool: the first pool the namespace is entitled to (its entitlement's classes in order, each class's
pools in order) that offers every GPU/RDMA resource the pod asks for and that the pod's own
nodeSelector and required node affinity do not exclude. One pool, like PodNodeSelector's single
selector: a disjunction over pools cannot be added to user affinity terms without rewriting them.
Pools with ``adoptAs`` are never pin targets: a raw request that selects such a pool itself is
adopted into its class, and a pin must not turn into an adoption on the next pass (idempotence).
Not pinned: DaemonSet templates and pods a DaemonSet owns (their controller places one pod per node
it selects; a pin would strand them), and requests no entitled pool can take (``pool-spoofing``
then denies whatever reach they keep).
"""

from __future__ import annotations

from webhook.engine.model import reach
from webhook.engine.model.context import Context, TemplateState
from webhook.engine.model.reach import normal_toleration, toleration_forms
from webhook.engine.patch import PatchBuilder
from webhook.policy.compiled import CompiledPool


def apply(ctx: Context, state: TemplateState, patch: PatchBuilder) -> None:
    res = state.resolution
    if res is None:
        return
    _merge(ctx, state, patch, res.node_selector, res.pool)


def _merge(
    ctx: Context, state: TemplateState, patch: PatchBuilder, node_selector: dict[str, str], pool: CompiledPool
) -> None:
    spec = state.tpl.spec_path
    selector = patch.get((*spec, "nodeSelector"))
    selector = selector if isinstance(selector, dict) else {}
    for key, value in node_selector.items():
        if key not in selector:  # a present key is the user's (resolution skipped conflicting pools)
            patch.set((*spec, "nodeSelector", key), value)
    if pool.tolerations:
        existing = patch.get((*spec, "tolerations"))
        have = {normal_toleration(t) for t in existing} if isinstance(existing, list) else set()
        missing = []
        for toleration, form in zip(pool.tolerations, toleration_forms(ctx.policy, pool), strict=True):
            if form not in have:
                missing.append(dict(toleration))
                have.add(form)
        patch.extend((*spec, "tolerations"), missing)


def _daemon_owned(ctx: Context) -> bool:
    """A per-node kind (the kind table's ``perNode``: a DaemonSet), or a Pod such a kind controls."""
    if ctx.workload.per_node:
        return True
    meta = ctx.obj.get("metadata") if ctx.workload.root_template else None
    owners = meta.get("ownerReferences") if isinstance(meta, dict) else None
    if not isinstance(owners, list):
        return False
    # by kind name, whatever the apiVersion says: the owner reference is the user's to write
    per_node = ctx.policy.recall(
        ("per-node-kinds",), lambda: frozenset(k.kind for k in ctx.policy.kinds.values() if k.per_node)
    )
    return any(isinstance(o, dict) and o.get("kind") in per_node and o.get("controller") is True for o in owners)


def pin_choice(ctx: Context, state: TemplateState) -> CompiledPool | None:
    """The pool a raw GPU request is pinned to (see the module docstring), or None."""
    if state.intent is not None or not state.resources.has_gpu:
        return None
    policy = ctx.policy
    if policy.settings.raw_requests != "pin" or _daemon_owned(ctx):
        return None
    pl = reach.placement(state.tpl.spec, state.resources)
    entitlement = ctx.entitlement

    def choose() -> str | None:
        for name in policy.entitled_pools(entitlement, None):
            pool = policy.pools[name]
            if pool.spec.adopt_as is None and pool.spec.node_selector and reach.pool_admits(pool, pl, taints=False):
                return name
        return None

    name = policy.recall(("pin", ctx.entitlement_key, pl), choose)
    return policy.pools[name] if name is not None else None


def pin(ctx: Context, state: TemplateState, patch: PatchBuilder | None) -> None:
    """Record (and with a patch, write) a raw request's pin."""
    pool = pin_choice(ctx, state)
    if pool is None:
        return
    state.pinned = pool.name
    if ctx.trace is not None:
        ctx.explain(f"{state.tpl.dotted() or 'pod'}: raw GPU request pinned to pool {pool.name} (rawRequests: pin)")
    if patch is not None:
        _merge(ctx, state, patch, dict(pool.spec.node_selector), pool)
