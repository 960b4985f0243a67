"""What a pod spec asks of GPUs and RDMA devices, per container, classified into families.

Families decide what counts as "mixed" (whole GPU plus a slice in one container) and what a device
plugin will actually hand out. HAMi is its own family because it spells a *slice* as
``nvidia.com/gpu`` plus ``nvidia.com/gpumem``: that is not a whole card.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

from webhook.policy.stacks import stacks
from webhook.quantity import QuantityError, parse_quantity

if TYPE_CHECKING:
    from webhook.engine.model.claims import Alternative, ClaimRequest, ClaimResolver, PodClaim

WHOLE = "whole"
MIG = "mig"
SHARED = "shared"
HAMI = "hami"
"""Slices metered under the whole-GPU name: ``nvidia.com/gpu`` plus HAMi's ``nvidia.com/gpumem``."""
RDMA = "rdma"
UNRESOLVED = "unresolved"  # a DRA device the webhook cannot tell (webhook.engine.model.claims)
SLICED = frozenset({MIG, SHARED, HAMI, UNRESOLVED})
"""Families that put a pod next to other tenants' work on one card (or may: an unresolved claim)."""

# Per-resource facts of the sharing stacks, from their table (sharing_stacks.yaml): read on every
# container of every review, so derived once here.
_STACKS = stacks()
HAMI_KEYS = _STACKS.metered_under_whole
"""Resources that make a whole-GPU count a slice (HAMi's gpumem, gpumem-percentage, gpucores)."""
WHOLE_KEYS = _STACKS.whole
MEMORY_UNITS: dict[str, int] = _STACKS.memory_units
"""Shared-memory resources and the bytes one unit stands for (each vendor's documented default)."""
MEMORY_PERCENT_KEYS = _STACKS.memory_percent
"""Memory as a percentage of one card, per device (HAMi, Volcano vGPU)."""
PER_DEVICE = _STACKS.per_device
"""Memory keys that are per device, and the key that counts the devices (absent: one)."""
SLICE_COUNTS: dict[str, int] = _STACKS.slice_counts
"""How a shared stack spells "several slices" (devices = ceil(amount / units per card)); a container
holding shared slices without one of these keys holds one slice."""

N = TypeVar("N", int, Fraction)


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


def plain_count(value: object) -> bool:
    """A decimal integer string such as "8": whole and non-negative without parsing a quantity."""
    return type(value) is str and len(value) < 19 and value.isdigit() and value.isascii()


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
    sidecar: bool = False  # a native sidecar: an init container with restartPolicy Always

    @property
    def kind(self) -> str:
        """How messages name the container: "container", "init container", "native sidecar"."""
        if self.group == "containers":
            return "container"
        if self.sidecar:
            return "native sidecar"
        return "init container" if self.group == "initContainers" else "ephemeral container"

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

    def positive(self, resource: str) -> bool:
        """A positive amount of ``resource`` is asked for (what NodeResourcesFit filters on). Plain
        digits, the usual spelling, are judged without building a Fraction."""
        value = self.limits.get(resource, self.requests.get(resource))
        if plain_count(value):
            return int(value) > 0  # type: ignore[arg-type]
        amount = self.amount(resource)
        return amount is not None and amount > 0

    def whole_gpus(self) -> int:
        """Physical devices this container binds: whole GPUs, HAMi vGPU counts, MIG devices."""
        whole, total = 0, Fraction(0)  # integers add without Fraction arithmetic (the usual case)
        for resource, fam in self.families.items():
            if fam in (WHOLE, MIG):
                raw = self.limits.get(resource, self.requests.get(resource))
                if plain_count(raw):  # "8": the usual spelling
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

    def gpus(self) -> int:
        """GPU devices as a class's ``maxGPUs`` counts them: whole GPUs and MIG devices, and each shared
        slice as one device (a shared class gives one slice per pod)."""
        return self.whole_gpus() or self._slices()

    def _slices(self) -> int:
        """Shared slices held (0 with none): the stack's count key, else one."""
        if not (SHARED in self.gpu_families or HAMI in self.gpu_families):
            return 0
        slices = 0
        for key, divisor in SLICE_COUNTS.items():
            if key in self.families:
                amount = self.amount(key)
                if amount is not None and amount > 0:
                    slices += -(-amount.numerator // (amount.denominator * divisor))
        return slices or 1

    def gpu_memory(self, card: int, mig: Mapping[str, int]) -> int:
        """Bytes of GPU memory this container's devices hold: shared-memory units in each vendor's unit,
        percentages of a ``card``, MIG profiles (``mig``: resource -> bytes), else whole cards."""
        if not self.gpu_families:
            return 0
        total, sized = Fraction(0), False
        for key in self.families:
            unit = MEMORY_UNITS.get(key)
            if unit is None and key not in MEMORY_PERCENT_KEYS:
                continue
            amount = self.amount(key)
            if amount is None or amount <= 0:
                continue
            sized = True
            per = amount * unit if unit is not None else amount * card / 100
            counter = PER_DEVICE.get(key)
            count = self.amount(counter) if counter is not None else None
            total += per * (count if count is not None and count > 0 else 1)
        if sized:
            return int(total)
        for key, fam in self.families.items():  # no memory key: each device holds what it is
            if fam != MIG and fam != WHOLE and key not in SLICE_COUNTS:
                continue
            amount = self.amount(key)
            if amount is None or amount <= 0:
                continue
            if fam == MIG:
                total += amount * mig.get(key, card)
            else:  # a whole card, or a slice with no memory limit (time-slicing, a vGPU without memory)
                total += amount * card / SLICE_COUNTS.get(key, 1)
        return int(total)

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
    fractions: tuple[str, ...] = ()  # GPU-fraction annotations the pod carries (KAI gpu-fraction, gpu-memory)
    _devices: int | None = None
    mapped: dict[str, Alternative | None] = field(default_factory=dict)
    """Extended resources a DeviceClass serves (KEP-5004) -> that class as a placement alternative
    (None: a class the webhook cannot tell). A node serves them by device plugin or by DRA."""
    _gpus: int | None = None

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpu_families)

    def effective_devices(self) -> int:
        """Physical devices the pod holds at once (whole GPUs, MIG devices, claimed devices), as
        Kubernetes accounts a pod's request (see :func:`effective`, the same rule).

        Computed once, with :meth:`effective_gpus`, in one pass: several rules ask, and the containers
        it reads are never changed after ``inspect_pod`` (the mutated object gets its own ``PodResources``)."""
        if self._devices is None:
            self._account()
        return self._devices  # type: ignore[return-value]

    def effective_gpus(self) -> int:
        """GPU devices as a class's ``maxGPUs`` counts them: :meth:`effective_devices` with each shared
        slice counted as a device (:meth:`ContainerResources.gpus`)."""
        if self._gpus is None:
            self._account()
        return self._gpus  # type: ignore[return-value]

    def _account(self) -> None:
        # :func:`effective` for two values at once, on the hot path: containers without GPUs cost nothing
        run_d = run_g = side_d = side_g = peak_d = peak_g = 0
        for c in self.containers:
            if not c.gpu_families or c.group == "ephemeralContainers":
                continue
            d = c.whole_gpus()
            g = d or c._slices()
            if c.group == "containers":
                run_d, run_g = run_d + d, run_g + g
            elif c.sidecar:
                side_d, side_g = side_d + d, side_g + g
            else:
                peak_d, peak_g = max(peak_d, d + side_d), max(peak_g, g + side_g)
        claimed = sum(c.devices for c in self.claims) if self.claims else 0
        if self.fractions:  # a scheduler's share of one card (KAI gpu-fraction)
            claimed += 1
        self._devices = max(run_d + side_d, peak_d) + claimed
        self._gpus = max(run_g + side_g, peak_g) + claimed

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


def effective(
    containers: list[ContainerResources], value: Callable[[ContainerResources], N]
) -> tuple[N, tuple[ContainerResources, ...]]:
    """A pod's effective request for ``value``, as kube-scheduler and the kubelet account it, and the
    containers of the phase that holds it.

    Kubernetes' rule (``component-helpers`` ``resource.PodRequests``; the sidecar KEP-753): native
    sidecars (init containers with ``restartPolicy: Always``) keep running, so they add to the regular
    containers' sum; an ordinary init container runs alone, beside the sidecars declared before it.
    The pod holds the largest of Σ regular + Σ sidecars and, for each ordinary init container, its own
    request + Σ sidecars declared before it. Ephemeral containers hold no resources."""
    running: Any = 0
    sidecars: Any = 0
    peak: Any = 0
    peak_at = -1
    for i, c in enumerate(containers):
        if c.group == "containers":
            running += value(c)
        elif c.group == "initContainers":
            amount = value(c)
            if c.sidecar:
                sidecars += amount
            elif amount and amount + sidecars > peak:
                peak, peak_at = amount + sidecars, i
    running += sidecars
    if peak > running:
        init = containers[peak_at]
        before = tuple(c for c in containers[:peak_at] if c.group == "initContainers" and c.sidecar and value(c))
        return peak, (*before, init)
    if not running:
        return running, ()
    return running, tuple(c for c in containers if (c.group == "containers" or c.sidecar) and value(c))


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
    annotations: Any = None,
    fraction_keys: tuple[str, ...] = (),
) -> PodResources:
    """The pod's devices. ``claims`` resolves DRA claims and DeviceClass-mapped extended resources;
    without it (no cluster view at all) neither is read. ``annotations`` (the pod's) with any of
    ``fraction_keys`` is a share of one GPU a scheduler hands out (KAI's ``gpu-fraction``): a shared
    device with no resource name, since the scheduler, not a device plugin, accounts for it."""
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
                    elif fam is not None and claims is not None and claims.mapped_in_cluster(key):
                        fam = _mapped_family(claims, key, mapped) or fam  # the cluster's class says what it is
                    if fam is not None:
                        fams[key] = fam
            name = container.get("name")
            gpu = ContainerResources.gpu_families_of(fams) if fams else frozenset()
            refs = _claim_refs(res.get("claims")) if "claims" in res else ()
            sidecar = group == "initContainers" and container.get("restartPolicy") == "Always"
            out.append(
                ContainerResources(
                    index,
                    group,
                    name if isinstance(name, str) else "",
                    container,
                    limits,
                    requests,
                    fams,
                    gpu,
                    refs,
                    sidecar,
                )
            )
    families = frozenset().union(*(c.gpu_families for c in out))
    fractions: tuple[str, ...] = ()
    if fraction_keys and isinstance(annotations, dict) and annotations:
        fractions = tuple(k for k in fraction_keys if annotations.get(k) not in (None, ""))
        if fractions:
            families = families | {SHARED}
    if claims is not None and spec.get("resourceClaims"):
        pod_claims = claims.pod_claims(spec)
        return PodResources(
            out, families.union(*(c.families for c in pod_claims)), pod_claims, fractions, mapped=mapped
        )
    if mapped or fractions:
        return PodResources(out, families, (), fractions, mapped=mapped)
    return PodResources(out, families)


def _mapped_family(claims: ClaimResolver, key: str, mapped: dict[str, Alternative | None]) -> str | None:
    from webhook.engine.model.claims import kind_family

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
