"""Rules about DRA resource claims the webhook cannot see through."""

from __future__ import annotations

from collections.abc import Iterable

from webhook.engine.model.context import Context, Finding, TemplateState
from webhook.engine.model.devices import MIG, UNRESOLVED
from webhook.engine.rules.registry import rule
from webhook.policy.compiled import CompiledPool


@rule(
    "claim-unresolved",
    needs=("claims",),
)
def claim_unresolved(ctx: Context) -> Iterable[Finding]:
    """Unknown is not "no GPU": the pod is judged as a GPU pod (placement, privileged-gpu) and warned.

    A referenced object may legitimately not exist yet when the pod is created (the apiserver admits
    it and the pod waits), so this warns rather than denies; a platform can make it deny."""
    for state in ctx.states:
        for claim in state.judged.claims:
            where = state.view.dotted("spec", "resourceClaims", claim.index)
            if claim.unresolved is not None:
                if claim.platform:
                    fix = f"apply `gpu-admission policy render` templates in {ctx.namespace}"
                elif claim.template is not None:
                    fix = f"create ResourceClaimTemplate {claim.template} in {ctx.namespace} first"
                elif claim.claim is not None:
                    fix = f"create ResourceClaim {claim.claim} in {ctx.namespace} first"
                else:
                    fix = "set resourceClaimTemplateName or resourceClaimName"
                yield Finding(
                    "claim-unresolved",
                    where,
                    f"{fix}: claim {claim.name!r} is unknown, judged as a GPU",
                    state.class_name,
                )
                continue
            for request in claim.requests:
                for name in request.unknown_classes:
                    yield Finding(
                        "claim-unresolved",
                        where,
                        f"add DeviceClass {name} to the policy's deviceClasses: claim {claim.name!r} uses it, "
                        "judged as a GPU",
                        state.class_name,
                    )


def claim_profiles(ctx: Context, state: TemplateState) -> Iterable[Finding]:
    """``mig-profile-unavailable`` for claims: a MIG profile (a per-profile DeviceClass such as
    ``mig-1g-12gb.gpu.nvidia.com``, or a ``profile ==`` selector) the pool's GPU model does not offer.

    Judged against the pool the pod lands on (resolved, pinned, or the one its nodeSelector targets);
    without one, against the pools it can reach, then against every GPU model of the catalogue. A
    request is reported only when none of its ``firstAvailable`` alternatives can be served there: a
    portable claim that lists one profile per GPU model is how such claims are meant to be written."""
    pool = _landing_pool(ctx, state)
    for claim in state.judged.claims:
        if claim.unresolved is not None:
            continue
        for request in claim.requests:
            if not request.profiles or request.any_profile or request.families - {MIG, UNRESOLVED}:
                continue
            where = state.view.dotted("spec", "resourceClaims", claim.index)
            if pool is not None:
                offered = [p.name for p in pool.profiles]
                if any(p in offered for p in request.profiles):
                    continue
                valid = ", ".join(offered) or "none (the pool is not MIG-partitioned)"
                yield Finding(
                    "mig-profile-unavailable",
                    where,
                    f"claim {claim.name!r} asks for MIG {' or '.join(request.profiles)}, which pool {pool.name} "
                    f"({pool.spec.gpu_model}) does not offer; valid: {valid}",
                    state.class_name,
                )
            else:
                reached = [ctx.policy.pools[n] for n in ctx.policy.pools if n in ctx.reach(state)]
                if reached and not any(p.name in request.profiles for pl in reached for p in pl.profiles):
                    valid = sorted({p.name for pl in reached for p in pl.profiles})
                    yield Finding(
                        "mig-profile-unavailable",
                        where,
                        f"claim {claim.name!r} asks for MIG {' or '.join(request.profiles)}, which no pool it can "
                        f"reach offers ({', '.join(pl.name for pl in reached)}); valid: {', '.join(valid) or 'none'}",
                        state.class_name,
                    )
                    continue
                known = {p.name for m in ctx.policy.models.values() for p in m.profiles}
                if any(p in known for p in request.profiles):
                    continue
                platform = sorted({p.name for pl in ctx.policy.pools.values() for p in pl.profiles})
                yield Finding(
                    "mig-profile-unavailable",
                    where,
                    f"claim {claim.name!r} asks for MIG {' or '.join(request.profiles)}, which no GPU model in "
                    f"the catalog offers; profiles on this platform's pools: {', '.join(platform) or 'none'}",
                    state.class_name,
                )


def _landing_pool(ctx: Context, state: TemplateState) -> CompiledPool | None:
    if state.resolution is not None:
        return state.resolution.pool
    if state.pinned is not None:
        return ctx.policy.pools.get(state.pinned)
    if len(state.targeted_pools) == 1:
        return ctx.policy.pools[state.targeted_pools[0]]
    return None
