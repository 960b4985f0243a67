"""``scheduler-claim-forged``: the scheduler's extended-resource-claim marker written by anyone else."""

from __future__ import annotations

from collections.abc import Iterable

from webhook.engine.model.claims import EXTENDED_RESOURCE_CLAIM
from webhook.engine.model.context import ClaimContext, Finding
from webhook.engine.model.requester import SCHEDULER
from webhook.engine.rules.registry import CLAIM, rule


@rule(
    "scheduler-claim-forged",
    subjects=(CLAIM,),
)
def scheduler_claim_forged(ctx: ClaimContext) -> Iterable[Finding]:
    """KEP-5004: the scheduler makes one claim per pod for its DRA-backed extended resources and marks it,
    so that quota counts it through the pod and not twice. A user's claim with the marker is counted by
    neither (kubernetes/kubernetes#135404): only the scheduler's identity may write it. A template's
    ``spec.metadata`` is copied into every claim made from it, so it is judged there too. Offline
    (``check``) there is no requester: a manifest in a repository is a user's."""
    claim = ctx.claim
    if EXTENDED_RESOURCE_CLAIM not in claim.annotations:
        return
    if ctx.requester is not None and ctx.requester.is_scheduler:
        return
    who = f"user {ctx.requester.username!r}" if ctx.requester is not None and ctx.requester.username else "a user"
    yield Finding(
        "scheduler-claim-forged",
        f"{claim.marker_at}[{EXTENDED_RESOURCE_CLAIM}]",
        f"remove the annotation {EXTENDED_RESOURCE_CLAIM}: only the scheduler ({SCHEDULER}) marks the claims it "
        f"makes for extended resources, and a {claim.kind} {who} marks escapes quota",
    )
