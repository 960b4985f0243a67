"""``device-taint-tolerated``: a claim request tolerating device taints its entitlement does not allow."""

from __future__ import annotations

from collections.abc import Iterable

from webhook.engine.model.context import ClaimContext, Context, Finding
from webhook.engine.model.device_taints import refusal
from webhook.engine.rules.registry import CLAIM, POD, rule


@rule(
    "device-taint-tolerated",
    needs=("claims",),  # judging a pod: its templates' claims (a claim object is judged on its own)
    subjects=(POD, CLAIM),
)
def device_taint_tolerated(ctx: Context | ClaimContext) -> Iterable[Finding]:
    """Judged like node tolerations (``webhook.engine.model.device_taints``), where the claim is written and on
    every pod that names it (a template may predate the policy)."""
    known = ctx.policy.device_taints
    if isinstance(ctx, ClaimContext):
        allowed = ctx.policy.allowed_device_taints(ctx.entitlement)
        for request in ctx.claim.requests:
            for tol in request.tolerations:
                why = refusal(tol, known, allowed)
                if why is not None:
                    yield Finding(
                        "device-taint-tolerated",
                        f"{ctx.claim.spec_at}.{tol.at}",
                        f"remove the toleration (or allow the taint in allowedDeviceTaints of an entitled class or "
                        f"pool): request {request.name!r} {why}",
                    )
        return
    for state in ctx.states:
        claims = state.judged.claims
        if not claims:
            continue
        pool = state.resolution.pool.name if state.resolution is not None else state.pinned
        allowed = ctx.policy.allowed_device_taints(ctx.entitlement, state.class_name, pool)
        for claim in claims:
            for request in claim.requests:
                for tol in request.tolerations:
                    why = refusal(tol, known, allowed)
                    if why is None:
                        continue
                    owner = f"class {state.class_name}" if state.class_name else "an entitled class or pool"
                    yield Finding(
                        "device-taint-tolerated",
                        state.view.dotted("spec", "resourceClaims", claim.index),
                        f"remove the toleration from {claim.ref} (or allow the taint in allowedDeviceTaints of "
                        f"{owner}): claim {claim.name!r} request {request.name!r} {why} ({tol.at})",
                        state.class_name,
                    )
