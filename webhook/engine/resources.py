"""What a pod spec asks of GPUs and RDMA devices, per container, classified into families.

Families decide what counts as "mixed" (whole GPU plus a slice in one container) and what a device
plugin will actually hand out. HAMi is its own family because it spells a *slice* as
``nvidia.com/gpu`` plus ``nvidia.com/gpumem``: that is not a whole card.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from webhook.quantity import QuantityError, parse_quantity

if TYPE_CHECKING:
    from webhook.engine.claims import Alternative, ClaimRequest, ClaimResolver, PodClaim

WHOLE = "whole"
MIG = "mig"
SHARED = "shared"
HAMI = "hami"
RDMA = "rdma"
UNRESOLVED = "unresolved"  # a DRA device the webhook cannot tell (webhook.engine.claims)
SLICED = frozenset({MIG, SHARED, HAMI, UNRESOLVED})
"""Families that put a pod next to other tenants' work on one card (or may: an unresolved claim)."""

HAMI_KEYS = frozenset({"nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"})
WHOLE_KEYS = frozenset({"nvidia.com/gpu", "aliyun.com/gpu-count"})


def family(name: str, *, gpu_prefixes: tuple[str, ...], rdma: frozenset[str]) -> str | None:
    """The device family of a resource name (None: not a GPU or RDMA resource)."""
    return _family(name, gpu_prefixes, rdma)


@lru_cache(maxsize=2048)
def _family(name: str, gpu_prefixes: tuple[str, ...], rdma: frozenset[str]) -> str | None:
    # every container of every review asks about cpu, memory and its devices: remembered
    if name in WHOLE_KEYS:
        return WHOLE
    if name.startswith("nvidia.com/mig-"):
        return MIG
    if name in HAMI_KEYS:
        return HAMI
    if name in rdma or name.startswith("rdma/"):
        return RDMA
    if name.startswith(gpu_prefixes):
        return SHARED
    return None


@dataclass(slots=True)
class ContainerResources:
    index: int
    group: str  # "containers" | "initContainers" | "ephemeralContainers"
    name: str
    container: dict[str, Any]
    limits: dict[str, Any]
    requests: dict[str, Any]
    families: dict[str, str] = field(default_factory=dict)  # resource -> family, for GPU/RDMA keys
    gpu_families: frozenset[str] = frozenset()  # computed once by inspect_pod: rules ask many times
    claim_refs: tuple[tuple[str, str | None], ...] = ()
    """``resources.claims`` entries: (claim name, request or None for the whole claim)."""

    @staticmethod
    def gpu_families_of(families: dict[str, str]) -> frozenset[str]:
        found = {f for f in families.values() if f != RDMA}
        if HAMI in found and WHOLE in found:
            # HAMi's nvidia.com/gpu is a vGPU count that goes with gpumem/gpucores: one family.
            found.discard(WHOLE)
        return frozenset(found)

    def amount(self, resource: str) -> Fraction | None:
        value = self.limits.get(resource, self.requests.get(resource))
        if value is None:
            return None
        try:
            return parse_quantity(value)
        except QuantityError:
            return None

    def whole_gpus(self) -> int:
        """Physical devices this container binds: whole GPUs, HAMi vGPU counts, MIG devices."""
        whole, total = 0, Fraction(0)  # integers add without Fraction arithmetic (the usual case)
        for resource, fam in self.families.items():
            if fam in (WHOLE, MIG):
                raw = self.limits.get(resource, self.requests.get(resource))
                if type(raw) is str and len(raw) < 19 and raw.isdigit() and raw.isascii():  # "8": the usual spelling
                    whole += int(raw)
                    continue
                amount = self.amount(resource)
                if amount is None:
                    continue
                if amount.denominator == 1:
                    whole += amount.numerator
                else:
                    total += amount
        return int(total + whole) if total else whole

    @property
    def privileged(self) -> bool:
        ctx = self.container.get("securityContext")
        return isinstance(ctx, dict) and ctx.get("privileged") is True


@dataclass(slots=True)
class PodResources:
    """A pod's devices from both sources: extended resources per container, and DRA claims per pod.

    Claims belong to the pod (Kubernetes allocates each ``spec.resourceClaims`` entry once, whichever
    containers use it), so they add to the pod's count and families, not to a container's."""

    containers: list[ContainerResources]
    gpu_families: frozenset[str] = frozenset()  # of all containers and claims; set by inspect_pod
    claims: tuple[PodClaim, ...] = ()
    _devices: int | None = None
    mapped: dict[str, Alternative | None] = field(default_factory=dict)
    """Extended resources a DeviceClass serves (KEP-5004) -> that class as a placement alternative
    (None: a class the webhook cannot tell). A node serves them by device plugin or by DRA."""

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpu_families)

    def effective_devices(self) -> int:
        """Devices the pod holds at once: regular containers add up, init containers run one at a time.

        Computed once: several rules ask, and the containers it reads are never changed after
        ``inspect_pod`` (the mutated object gets its own ``PodResources``)."""
        if self._devices is None:
            regular = sum(c.whole_gpus() for c in self.containers if c.group == "containers")
            init = max((c.whole_gpus() for c in self.containers if c.group == "initContainers"), default=0)
            self._devices = max(regular, init) + sum(c.devices for c in self.claims)
        return self._devices

    @property
    def takes_all(self) -> bool:
        """A claim with ``allocationMode: All``: every matching device of the node, however many."""
        return any(r.all for c in self.claims for r in c.requests)

    @property
    def claim_memory(self) -> int | None:
        """The largest memory per device any claim asks for (worst case over alternatives)."""
        sizes = [r.memory for c in self.claims for r in c.requests if r.memory is not None]
        return max(sizes) if sizes else None

    def claims_of(self, c: ContainerResources) -> tuple[tuple[PodClaim, tuple[ClaimRequest, ...]], ...]:
        """The claims a container uses, each with the requests it gets (``request`` names one; none:
        all of them). A claim two containers share is one allocation: the pod's totals
        (:meth:`effective_devices`, :attr:`claim_memory`) count it once, whoever uses it."""
        if not c.claim_refs or not self.claims:
            return ()
        by_name = {claim.name: claim for claim in self.claims}
        out: list[tuple[PodClaim, tuple[ClaimRequest, ...]]] = []
        for name, request in c.claim_refs:
            claim = by_name.get(name)
            if claim is None:
                continue
            requests = claim.requests if request is None else tuple(r for r in claim.requests if r.name == request)
            out.append((claim, requests))
        return tuple(out)

    def claim_devices_of(self, c: ContainerResources) -> int:
        """Devices the container's claims give it (worst case over ``firstAvailable``)."""
        return sum(r.count for _, requests in self.claims_of(c) for r in requests if r.families - {UNRESOLVED})

    def claim_families_of(self, c: ContainerResources) -> frozenset[str]:
        """Device families the container's claims may give it (UNRESOLVED for a claim nobody knows)."""
        out: set[str] = set()
        for claim, requests in self.claims_of(c):
            if claim.unresolved is not None:
                out.add(UNRESOLVED)
            for r in requests:
                out.update(r.families)
        return frozenset(out)

    def claim_memory_of(self, c: ContainerResources) -> int | None:
        """The largest memory per device the container's claims ask for (worst case over alternatives)."""
        sizes = [r.memory for _, requests in self.claims_of(c) for r in requests if r.memory is not None]
        return max(sizes) if sizes else None

    @property
    def dra_demand(self) -> tuple[frozenset[Alternative], ...]:
        """What a node must serve for the pod's resolved claims: per request, its alternatives.
        Unresolved claims and requests that cannot narrow placement add nothing (any GPU may serve them)."""
        return tuple(
            r.offered_by
            for c in self.claims
            if c.unresolved is None
            for r in c.requests
            if r.offered_by is not None
        )

    @property
    def dra_classes(self) -> frozenset[str]:
        """DeviceClasses the pod's resolved GPU claims ask for (what a pool must serve)."""
        if not self.claims:
            return frozenset()
        return frozenset().union(*(c.classes for c in self.claims if c.unresolved is None))



def _map(value: Any) -> dict[str, Any]:
    return value if type(value) is dict or isinstance(value, dict) else {}


CONTAINER_GROUPS = ("initContainers", "containers", "ephemeralContainers")
"""Every container of a pod. Ephemeral containers (``kubectl debug``, added through the
``pods/ephemeralcontainers`` subresource, whose review carries the whole Pod) hold no resources,
but they run on the pod's node with whatever privileges they ask for, so device-reach rules must
see them; device counts read only ``containers`` and ``initContainers``."""


def inspect_pod(
    spec: dict[str, Any],
    *,
    gpu_prefixes: tuple[str, ...],
    rdma: frozenset[str],
    claims: ClaimResolver | None = None,
) -> PodResources:
    """The pod's devices. ``claims`` resolves DRA claims and DeviceClass-mapped extended resources;
    without it (no cluster view at all) neither is read."""
    out: list[ContainerResources] = []
    mapped: dict[str, Alternative | None] = {}
    for group in CONTAINER_GROUPS:
        items = spec.get(group)
        if not isinstance(items, list):
            continue
        for index, container in enumerate(items):
            if not isinstance(container, dict):
                continue
            res = _map(container.get("resources"))
            limits, requests = _map(res.get("limits")), _map(res.get("requests"))
            fams: dict[str, str] = {}
            for key in (*limits, *requests):
                if isinstance(key, str) and key not in fams:
                    fam = _family(key, gpu_prefixes, rdma)
                    if fam is None and claims is not None and "/" in key:
                        fam = _mapped_family(claims, key, mapped)
                    if fam is not None:
                        fams[key] = fam
            name = container.get("name")
            gpu = ContainerResources.gpu_families_of(fams) if fams else frozenset()
            refs = _claim_refs(res.get("claims")) if "claims" in res else ()
            out.append(
                ContainerResources(
                    index, group, name if isinstance(name, str) else "", container, limits, requests, fams, gpu, refs
                )
            )
    families = frozenset().union(*(c.gpu_families for c in out))
    if claims is not None and spec.get("resourceClaims"):
        pod_claims = claims.pod_claims(spec)
        return PodResources(out, families.union(*(c.families for c in pod_claims)), pod_claims, mapped=mapped)
    return PodResources(out, families, mapped=mapped) if mapped else PodResources(out, families)


def _mapped_family(claims: ClaimResolver, key: str, mapped: dict[str, Alternative | None]) -> str | None:
    from webhook.engine.claims import kind_family

    found = claims.extended_class(key)
    if found is None:
        return None
    name, info = found
    if info is None:
        mapped[key] = None
        return UNRESOLVED
    fam = kind_family(info.kind)
    if fam is not None:
        mapped[key] = ("class", name, info.driver or "", info.kind.value)
    return fam


def _claim_refs(items: Any) -> tuple[tuple[str, str | None], ...]:
    out = []
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            request = item.get("request")
            out.append((item["name"], request if isinstance(request, str) and request else None))
    return tuple(out)
