"""Rules about DRA resource claims the webhook cannot see through."""

from __future__ import annotations

from collections.abc import Iterable

from webhook.engine.context import Context, Finding
from webhook.engine.decision import Action
from webhook.engine.rules.registry import rule


@rule(
    "claim-unresolved",
    Action.WARN,
    "a resource claim whose template, claim or device class the webhook does not know (cannot tell "
    "whether it is a GPU)",
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
