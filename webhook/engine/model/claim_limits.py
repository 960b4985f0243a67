"""What a namespace's entitlement lets any of its pods hold through one claim object.

A ResourceClaimTemplate may be created after the pod that names it (the pod was admitted with
``claim-unresolved``, judged as a GPU pod of unknown size), and a ResourceClaim may be re-created under
the name a pending pod waits for. Nothing judges the pod again, so the claim object is judged where it is
written, on what a pod's judgement reads of it, against the most the namespace could be allowed:

- the GPUs its requests count, against the largest ``maxGPUs`` of the classes the namespace is entitled
  to (unbounded where a class sets none, or where raw GPU requests, which no class bounds, are not
  denied there);
- ``allocationMode: All`` (every GPU of a node), against each entitled class's maximum on the pools of
  that class that serve the request;
- the device classes, against the pools the namespace is entitled to: a request no entitled pool serves.

The pod's own class is not known here (any pod of the namespace may name the object), so a count within
some entitled class's maximum passes, and the pod that names the object is still judged with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from webhook.engine.model.claims import UNRESOLVED, ClaimRequest, ClaimResolver
from webhook.policy.compiled import CompiledPool, Policy
from webhook.policy.model import Entitlement


@dataclass(frozen=True, slots=True)
class EntitledClass:
    name: str
    max_gpus: int | None
    pools: tuple[CompiledPool, ...]


@dataclass(frozen=True, slots=True)
class ClaimLimits:
    """The entitlement as one claim object sees it (``None`` entitlement: nothing to compare with)."""

    classes: tuple[EntitledClass, ...]
    pools: tuple[CompiledPool, ...]
    raw_allowed: bool
    """Raw GPU requests (no class, so no class maximum) are not denied in the namespace."""

    @property
    def most_gpus(self) -> tuple[int, str] | None:
        """(the largest per-pod maximum of an entitled class, that class); None: unbounded."""
        if self.raw_allowed or not self.classes or any(c.max_gpus is None for c in self.classes):
            return None
        best = max(self.classes, key=lambda c: c.max_gpus or 0)
        return int(best.max_gpus or 0), best.name

    def serving(self, request: ClaimRequest, pools: tuple[CompiledPool, ...] | None = None) -> tuple[CompiledPool, ...]:
        """The pools (of ``pools``, default the entitled ones) whose nodes may serve the request."""
        among = self.pools if pools is None else pools
        if request.offered_by is None:
            return among  # an alternative the webhook cannot tell narrows nothing
        return tuple(p for p in among if any(_serves(p, alt) for alt in request.offered_by))

    def all_fits(self, request: ClaimRequest) -> bool:
        """An ``All`` request stays within the maximum of some entitled class on every pool of it that serves
        the request (or raw requests are allowed, which no class bounds)."""
        if self.raw_allowed:
            return True
        for cls in self.classes:
            serving = self.serving(request, cls.pools)
            if serving and (cls.max_gpus is None or all(p.spec.gpus_per_node <= cls.max_gpus for p in serving)):
                return True
        return False


def _serves(pool: CompiledPool, alternative: tuple[str, ...]) -> bool:
    if alternative[0] == "resource":
        return alternative[1] in pool.offers
    _, name, driver, kind = alternative
    return pool.serves_class(name, driver, kind)


def platform_own(
    policy: Policy, resolver: ClaimResolver, kind: str, name: str, requests: tuple[ClaimRequest, ...]
) -> bool:
    """The object is one of the platform's own templates (``policy render`` emits them per pool, every size
    the pool offers): its name and what its requests say are the policy's. A pod that names such a name is
    judged with the policy's spec whether or not the object exists, so its size is the pod's to answer for."""
    own = policy.dra.templates.get(name) if kind == "ResourceClaimTemplate" else None
    return own is not None and resolver.requests(own.claim_spec()) == requests


def gpu_requests(requests: tuple[ClaimRequest, ...]) -> tuple[ClaimRequest, ...]:
    """The requests that may allocate GPUs the webhook knows of (a class nobody knows is the pod's
    ``claim-unresolved``)."""
    return tuple(r for r in requests if r.families - {UNRESOLVED})


def limits(policy: Policy, entitlement: Entitlement | None, *, raw_allowed: bool) -> ClaimLimits | None:
    if entitlement is None:
        return None
    classes = tuple(
        EntitledClass(
            name,
            policy.classes[name].max_gpus,
            tuple(policy.pools[p] for p in policy.entitled_pools(entitlement, name) if p in policy.pools),
        )
        for name in entitlement.classes
        if name in policy.classes
    )
    pools = tuple(policy.pools[p] for p in policy.entitled_pools(entitlement, None) if p in policy.pools)
    return ClaimLimits(classes, pools, raw_allowed)
