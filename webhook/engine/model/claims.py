"""DRA resource claims, resolved to the devices a pod will hold: the claim half of the normalised model.

A pod names claims in ``spec.resourceClaims``: a ResourceClaimTemplate (one claim per pod) or a
ResourceClaim (shared). Neither is in the admission request, so they are looked up in the cluster
view the edges pass (``Cluster.claim_templates`` / ``claims``), then among the platform's own templates
(their content is the policy's). Each request of the claim (``exactly``, or each ``firstAvailable``
alternative; ``resource.k8s.io/v1`` and the flat ``v1beta1`` form) names a DeviceClass, judged
through the policy's catalogue, else through a DeviceClass object of the cluster view by the driver
its CEL selector requires: a GPU driver's class is a GPU, any other driver's (a NIC, an FPGA, storage)
holds no GPU, and only a class that is not known at all is judged as a GPU.

What comes out is the worst case a rule must judge: the largest count and memory of any alternative,
and every family any alternative may allocate (placement and ``privileged-gpu`` must hold for each).
The Kubernetes 1.36 parts are normalised here too, so rules read data, not manifests: each request's
device-taint tolerations, its capacity requests with what the devices of the cluster view's
ResourceSlices will really consume for them (request policies round up), and, for a ComputeDomain's
channel template, the domain it belongs to.
A claim that cannot be resolved is kept as *unresolved*: rules treat it as a GPU the webhook cannot
size (``claim-unresolved`` warns), never as "not a GPU".
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from webhook.engine.model.cluster import Cluster
from webhook.engine.model.devices import MIG, SHARED, UNRESOLVED, WHOLE
from webhook.policy.compiled import Policy
from webhook.policy.dra import ClassInfo
from webhook.policy.model import DeviceClassKind, mig_profile_memory_gib
from webhook.quantity import GIB, QuantityError, parse_quantity

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
"""Every DeviceClass can be asked for as this extended resource (KEP-5004)."""
EXTENDED_RESOURCE_CLAIM = "resource.kubernetes.io/extended-resource-claim"
"""The annotation the scheduler puts on the claim it makes for a pod's DRA-backed extended resources
(KEP-5004; its single valid value is "true"): quota counts that claim through the pod instead."""

Alternative = tuple[str, ...]
"""One way a node can serve a device request (read by ``webhook.engine.model.reach``):
``("class", name, driver, kind)`` a DeviceClass a pool's DRA driver serves, or ``("resource", name)``
an extended resource its device plugin advertises."""

_FAMILY = {DeviceClassKind.WHOLE: WHOLE, DeviceClassKind.MIG: MIG, DeviceClassKind.SHARED: SHARED}
_QUOTE = r"""['"]([^'"]+)['"]"""
_DRIVER = re.compile(r"device\.driver\s*==\s*" + _QUOTE)
_TYPE = re.compile(r"device\.attributes\[" + _QUOTE + r"\]\.type\s*==\s*" + _QUOTE)
_PROFILE = re.compile(r"device\.attributes\[" + _QUOTE + r"\]\.profile\s*==\s*" + _QUOTE)
_CAPACITY = re.compile(
    r"device\.capacity\[" + _QUOTE + r"\]\.memory\.compareTo\(\s*quantity\(\s*" + _QUOTE + r"\s*\)\s*\)\s*>=?\s*0"
)


@dataclass(frozen=True, slots=True)
class DeviceToleration:
    """A device-taint toleration of a request that may allocate a GPU (KEP-5055), where it is written."""

    key: str  # "" with Exists: every taint
    operator: str  # Exists | Equal
    value: str
    effect: str  # "" every effect, else NoSchedule | NoExecute
    at: str  # the field path inside the claim spec: devices.requests[0].exactly.tolerations[1]
    device_class: str = ""


@dataclass(frozen=True, slots=True)
class CapacityAsk:
    """One ``capacity.requests`` entry of a request that may allocate a GPU (KEP-5075), and what the
    devices the cluster view knows will really consume for it.

    A device that allows multiple allocations rounds a request up to its request policy (below ``min``
    to ``min``, between steps to the next step, to the next ``validValues`` entry); one that does not
    is allocated whole if its capacity is large enough. ``allocated`` is the worst case over the devices
    that can serve the request, ``None`` when none can (or none is known: ``devices`` is 0)."""

    name: str  # as written: memory, or a qualified name
    requested: Fraction
    at: str  # devices.requests[0].exactly.capacity.requests[memory]
    device_class: str
    devices: int = 0  # devices of the class's driver offering this capacity
    allocated: Fraction | None = None
    largest: Fraction | None = None  # the largest amount any of those devices accepts

    @property
    def unsatisfiable(self) -> bool:
        return self.devices > 0 and self.allocated is None


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """One request of a claim, worst case over its ``firstAvailable`` alternatives."""

    name: str
    families: frozenset[str]  # of the GPU alternatives; UNRESOLVED for a class nobody knows
    classes: frozenset[str]  # DeviceClass names of every alternative
    count: int  # devices, the largest alternative's; allocationMode All counts 1 here and sets ``all``
    all: bool = False
    memory: int | None = None  # bytes per device, the largest alternative's
    profiles: tuple[str, ...] = ()
    unknown_classes: tuple[str, ...] = ()
    admin: bool = False
    admin_subrequests: tuple[str, ...] = ()  # the ``firstAvailable`` alternatives that set adminAccess
    any_profile: bool = False  # a MIG alternative that names no profile (any the node has)
    offered_by: frozenset[Alternative] | None = None
    """What a node must serve for this request, one alternative of which suffices (the scheduler tries
    ``firstAvailable`` in order); None when the request cannot narrow placement (an alternative the
    webhook cannot tell, or one that is not a GPU and may be served anywhere)."""
    tolerations: tuple[DeviceToleration, ...] = ()  # of the alternatives that may be GPUs
    capacity: tuple[CapacityAsk, ...] = ()  # of the alternatives that may be GPUs
    requested_memory: int | None = None  # bytes as written, when ``memory`` is rounded up by a request policy


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One ``spec.resourceClaims`` entry of a pod and what it resolves to."""

    index: int
    name: str
    template: str | None
    claim: str | None
    requests: tuple[ClaimRequest, ...] = ()
    unresolved: str | None = None  # why it could not be resolved (no template, no claim)
    platform: bool = False  # one of the policy's own templates
    sharing: str | None = None  # opaque config sharing strategy (TimeSlicing, MPS)
    compute_domain: str | None = None  # the ComputeDomain whose channel template this is (multi-node NVLink)

    @property
    def ref(self) -> str:
        return self.template or self.claim or ""

    @property
    def families(self) -> frozenset[str]:
        if self.unresolved is not None:
            return frozenset({UNRESOLVED})
        return frozenset().union(*(r.families for r in self.requests))

    @property
    def devices(self) -> int:
        return sum(r.count for r in self.requests if r.families - {UNRESOLVED})

    @property
    def classes(self) -> frozenset[str]:
        return frozenset().union(*(r.classes for r in self.requests))


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


@dataclass(slots=True)
class ClaimResolver:
    """Resolves claims and DeviceClass-mapped extended resources for one review (namespace + cluster view)."""

    policy: Policy
    cluster: Cluster
    namespace: str
    _mapped: dict[str, str] | None = None
    _capacities: dict[str, list[tuple[bool, Mapping[str, Any]]]] | None = field(default=None, repr=False)
    _domains: dict[tuple[str, str], str] | None = field(default=None, repr=False)

    # --- device classes ------------------------------------------------------------------------

    def device_class(self, name: str) -> ClassInfo | None:
        """The policy's entry first (the platform team's word), else the cluster's DeviceClass object."""
        found = self.policy.dra.lookup(name)
        if found is not None:
            return found
        obj = self.cluster.device_classes.get(name)
        return self._from_object(name, obj) if isinstance(obj, Mapping) else None

    def _from_object(self, name: str, obj: Mapping[str, Any]) -> ClassInfo | None:
        spec = _map(obj.get("spec"))
        text = " && ".join(str(_map(_map(s).get("cel")).get("expression") or "") for s in _list(spec.get("selectors")))
        extended = spec.get("extendedResourceName") if isinstance(spec.get("extendedResourceName"), str) else None
        driver = _DRIVER.search(text)
        if driver is None:
            return None  # selects no driver the webhook can read: cannot tell whether it is a GPU
        kind = self.policy.dra.drivers.get(driver.group(1))
        if kind is None:  # a known class of a driver that is not a GPU driver (NIC, FPGA, storage)
            return ClassInfo(name, DeviceClassKind.OTHER, driver.group(1), None, None, extended, "cluster")
        typed = _TYPE.search(text)
        profile = _PROFILE.search(text)
        if (typed is not None and typed.group(2) == "mig") or profile is not None:
            kind = DeviceClassKind.MIG
        return ClassInfo(
            name,
            kind,
            driver.group(1),
            profile.group(2) if profile else None,
            None,
            extended,
            "cluster",
        )

    def extended_class(self, resource: str) -> tuple[str, ClassInfo | None] | None:
        """The DeviceClass serving an extended resource (KEP-5004) and what it is (None: unknown class);
        None when no class maps the resource."""
        if resource.startswith(IMPLICIT_PREFIX):
            name = resource[len(IMPLICIT_PREFIX) :]
            return name, self.device_class(name)
        if self._mapped is None:
            mapped = {}
            for name, obj in self.cluster.device_classes.items():
                spec = _map(_map(obj).get("spec"))
                if isinstance(spec.get("extendedResourceName"), str):
                    mapped[spec["extendedResourceName"]] = name
            self._mapped = mapped
        name = self._mapped.get(resource) or self.policy.dra.extended.get(resource)
        if name is None:
            return None
        return name, self.device_class(name)

    def mapped_in_cluster(self, resource: str) -> bool:
        """A DeviceClass object of the cluster view maps ``resource`` (``extendedResourceName``) and the
        policy says which pools run DRA (``dra:`` blocks): on such a cluster ``nvidia.com/gpu`` is served,
        and counted, through that class. A policy naming no DRA pool keeps device-plugin names as they are."""
        if not self.policy.dra.pool_classes:
            return False
        if self._mapped is None:
            self.extended_class(resource)
        return resource in (self._mapped or {})

    def extended_family(self, resource: str) -> str | None:
        """The family of an extended resource a DeviceClass serves (None: no class maps it)."""
        found = self.extended_class(resource)
        if found is None:
            return None
        info = found[1]
        return UNRESOLVED if info is None else _FAMILY.get(info.kind)

    # --- claims --------------------------------------------------------------------------------

    def pod_claims(self, spec: Mapping[str, Any]) -> tuple[PodClaim, ...]:
        out = []
        for index, entry in enumerate(_list(spec.get("resourceClaims"))):
            if isinstance(entry, dict):
                out.append(self._claim(index, entry))
        return tuple(out)

    def _claim(self, index: int, entry: dict[str, Any]) -> PodClaim:
        name = str(entry.get("name") or "")
        template = entry.get("resourceClaimTemplateName")
        claim = entry.get("resourceClaimName")
        source = _map(entry.get("source"))  # the alpha wrapper, tombstoned since 1.31: read, never written
        template = template if isinstance(template, str) else source.get("resourceClaimTemplateName")
        claim = claim if isinstance(claim, str) else source.get("resourceClaimName")
        template = template if isinstance(template, str) and template else None
        claim = claim if isinstance(claim, str) and claim else None
        ns = self.namespace
        platform = False
        if template is not None:
            obj = self.cluster.claim_templates.get((ns, template))
            claim_spec = _map(_map(_map(obj).get("spec")).get("spec")) if obj is not None else None
            if claim_spec is None and template in self.policy.dra.templates:
                claim_spec, platform = self.policy.dra.templates[template].claim_spec(), True
            if claim_spec is None:
                return PodClaim(index, name, template, None, unresolved=f"ResourceClaimTemplate {template} not found")
            if obj is None and self.cluster.complete:
                return PodClaim(
                    index,
                    name,
                    template,
                    None,
                    self._requests(claim_spec),
                    platform=platform,
                    unresolved=f"the platform's ResourceClaimTemplate {template} is not in the namespace",
                )
        elif claim is not None:
            obj = self.cluster.claims.get((ns, claim))
            if obj is None:
                return PodClaim(index, name, None, claim, unresolved=f"ResourceClaim {claim} not found")
            claim_spec = _map(_map(obj).get("spec"))
        else:
            return PodClaim(index, name, None, None, unresolved="names neither a template nor a claim")
        return PodClaim(
            index,
            name,
            template,
            claim,
            self._requests(claim_spec),
            platform=platform,
            sharing=_sharing(claim_spec),
            compute_domain=self.compute_domain(template) if template is not None else None,
        )

    def compute_domain(self, template: str) -> str | None:
        """The ComputeDomain (of this namespace) whose controller makes ``template``, its IMEX channel."""
        if self._domains is None:
            index = {}
            for (ns, domain), obj in self.cluster.compute_domains.items():
                channel = _map(_map(_map(_map(obj).get("spec")).get("channel")).get("resourceClaimTemplate"))
                if isinstance(channel.get("name"), str) and channel["name"]:
                    index[(ns, channel["name"])] = domain
            self._domains = index
        return self._domains.get((self.namespace, template))

    def requests(self, claim_spec: Mapping[str, Any]) -> tuple[ClaimRequest, ...]:
        """The GPU requests of a ResourceClaimSpec (a claim's ``spec``, a template's ``spec.spec``)."""
        return self._requests(claim_spec)

    def _requests(self, claim_spec: Mapping[str, Any]) -> tuple[ClaimRequest, ...]:
        devices = _map(claim_spec.get("devices"))
        out = []
        for index, request in enumerate(_list(devices.get("requests"))):
            if not isinstance(request, dict):
                continue
            at = f"devices.requests[{index}]"
            if isinstance(request.get("exactly"), dict):
                alternatives = [(f"{at}.exactly", request["exactly"])]
            elif isinstance(request.get("firstAvailable"), list):
                subs = enumerate(request["firstAvailable"])
                alternatives = [(f"{at}.firstAvailable[{i}]", a) for i, a in subs if isinstance(a, dict)]
            else:
                alternatives = [(at, request)]  # v1beta1: the request itself names the class
            judged = self._request(str(request.get("name") or ""), alternatives, "firstAvailable" in request)
            if judged is not None:
                out.append(judged)
        return tuple(out)

    def _request(
        self, name: str, alternatives: list[tuple[str, dict[str, Any]]], sub: bool = False
    ) -> ClaimRequest | None:
        families: set[str] = set()
        classes: set[str] = set()
        unknown: list[str] = []
        profiles: list[str] = []
        count, every, memory, admin = 0, False, None, False
        admin_subs: list[str] = []
        offered: set[Alternative] = set()
        narrows, any_profile = True, False
        tolerations: list[DeviceToleration] = []
        asks: list[CapacityAsk] = []
        written: int | None = None
        for at, alt in alternatives:
            class_name = alt.get("deviceClassName")
            if not isinstance(class_name, str):
                continue
            classes.add(class_name)
            info = self.device_class(class_name)
            if info is None:
                unknown.append(class_name)
                families.add(UNRESOLVED)
                narrows = False
            elif not info.gpu:
                narrows = False  # a device that is not a GPU may be served anywhere
                continue
            else:
                offered.add(class_alternative(class_name, info))
            tolerations.extend(_tolerations(alt, at, class_name))
            mine = self._capacity_asks(alt, at, class_name, info)
            asks.extend(mine)
            selectors = " && ".join(
                str(_map(_map(s).get("cel")).get("expression") or "") for s in _list(alt.get("selectors"))
            )
            profile = info.profile if info is not None else None
            found = _PROFILE.search(selectors)
            if found is not None:
                profile = found.group(2)
            requested = _capacity(alt)
            for ask in mine:
                if ask.name in ("memory", f"{info.driver if info is not None else ''}/memory") and ask.allocated:
                    if requested is not None and ask.allocated > requested:
                        written = requested if written is None else max(written, requested)
                    requested = math.ceil(ask.allocated)  # what the device will really consume
            family = _FAMILY.get(info.kind, WHOLE) if info is not None else UNRESOLVED
            if profile is not None and family != UNRESOLVED:
                family = MIG
            elif family == WHOLE and requested is not None:
                family = SHARED  # consumable capacity: a share of a card other claims may hold too
            families.add(family)
            if profile is not None:
                profiles.append(profile)
            elif family == MIG:
                any_profile = True
            size = requested if requested is not None else _cel_memory(selectors)
            if size is None and profile is not None:
                size = _profile_memory(profile)
            if size is None and info is not None:
                size = info.memory
            if size is not None:
                memory = size if memory is None else max(memory, size)
            if alt.get("allocationMode") == "All":
                every = True
                count = max(count, 1)
            else:
                raw = alt.get("count", 1)
                count = max(count, raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else 1)
            if alt.get("adminAccess") is True:
                admin = True
                if sub and isinstance(alt.get("name"), str):
                    admin_subs.append(alt["name"])
        if not families:
            return None  # no GPU among the alternatives (an IMEX channel, a NIC)
        return ClaimRequest(
            name,
            frozenset(families),
            frozenset(classes),
            count,
            every,
            memory,
            tuple(profiles),
            tuple(unknown),
            admin,
            tuple(admin_subs),
            any_profile,
            frozenset(offered) if narrows and offered else None,
            tuple(tolerations),
            tuple(asks),
            written,
        )

    # --- consumable capacity (KEP-5075) ----------------------------------------------------------

    def _capacity_asks(
        self, alt: Mapping[str, Any], at: str, class_name: str, info: ClassInfo | None
    ) -> list[CapacityAsk]:
        requests = _map(_map(alt.get("capacity")).get("requests"))
        if not requests:
            return []
        driver = info.driver if info is not None else None
        out = []
        for name, raw in requests.items():
            try:
                requested = parse_quantity(raw)
            except QuantityError:
                continue  # the apiserver refuses a malformed quantity
            where = f"{at}.capacity.requests[{name}]"
            consumed, largest, devices = [], [], 0
            for shared, capacity in self._device_capacities(driver, str(name)):
                amount, top = _consumed(requested, capacity, shared)
                if top is None:
                    continue  # a capacity without a readable value says nothing about this device
                devices += 1
                if amount is not None:
                    consumed.append(amount)
                if top is not None:
                    largest.append(top)
            out.append(
                CapacityAsk(
                    str(name),
                    requested,
                    where,
                    class_name,
                    devices,
                    max(consumed) if consumed else None,
                    max(largest) if largest else None,
                )
            )
        return out

    def _device_capacities(self, driver: str | None, name: str) -> list[tuple[bool, Mapping[str, Any]]]:
        """(allows multiple allocations, DeviceCapacity) of every device of ``driver`` (every driver when
        the class's is unknown) that has capacity ``name`` (unqualified names are the driver's)."""
        if self._capacities is None:
            index: dict[str, list[tuple[bool, Mapping[str, Any]]]] = {}
            for obj in self.cluster.resource_slices.values():
                spec = _map(_map(obj).get("spec"))
                slice_driver = spec.get("driver")
                if not isinstance(slice_driver, str):
                    continue
                for device in _list(spec.get("devices")):
                    device = _map(device)
                    body = _map(device.get("basic")) or device  # v1beta1 wraps the device in ``basic``
                    shared = body.get("allowMultipleAllocations") is True
                    for raw_key, capacity in _map(body.get("capacity")).items():
                        key = str(raw_key)  # YAML may give a number
                        qualified = key if "/" in key else f"{slice_driver}/{key}"
                        index.setdefault(qualified, []).append((shared, _map(capacity)))
                        index.setdefault(f"*/{key.rpartition('/')[2]}", []).append((shared, _map(capacity)))
            self._capacities = index
        if driver:
            return self._capacities.get(name if "/" in name else f"{driver}/{name}", [])
        return self._capacities.get(f"*/{name.rpartition('/')[2]}", [])


def kind_family(kind: DeviceClassKind) -> str | None:
    """The device family of a DeviceClass kind (None: not a GPU)."""
    return _FAMILY.get(kind)


def class_alternative(name: str, info: ClassInfo) -> Alternative:
    return ("class", name, info.driver or "", info.kind.value)


def _quantity(value: Any) -> Fraction | None:
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _consumed(
    requested: Fraction, capacity: Mapping[str, Any], shared: bool
) -> tuple[Fraction | None, Fraction | None]:
    """(what one device consumes for the request, None if it cannot serve it; the largest it accepts).

    The API's rules (resource/v1 ``CapacityRequestPolicy``): ``validValues`` rounds up to the smallest
    value >= the request; ``validRange`` rounds a request below ``min`` up to ``min`` and between steps
    up to ``min + n*step``, and refuses one above ``max``; without a policy any amount up to the capacity.
    A device that does not allow multiple allocations is allocated whole, if it has enough."""
    value = _quantity(capacity.get("value"))
    if value is None:
        return None, None
    policy = _map(capacity.get("requestPolicy")) if shared else {}
    values = sorted(v for v in (_quantity(x) for x in _list(policy.get("validValues"))) if v is not None)
    if values:
        fits = [v for v in values if v >= requested and v <= value]
        return (fits[0] if fits else None), min(values[-1], value)
    span = _map(policy.get("validRange"))
    if span:
        low = _quantity(span.get("min")) or Fraction(0)
        high = _quantity(span.get("max"))
        high = value if high is None else min(high, value)
        step = _quantity(span.get("step"))
        amount = max(requested, low)
        if step and step > 0:
            amount = low + math.ceil((amount - low) / step) * step
        return (amount if amount <= high else None), high
    if not shared:
        return (value if requested <= value else None), value
    return (requested if requested <= value else None), value


def _tolerations(alt: Mapping[str, Any], at: str, device_class: str) -> list[DeviceToleration]:
    out = []
    for index, item in enumerate(_list(alt.get("tolerations"))):
        if not isinstance(item, dict):
            continue
        key, value, effect = item.get("key"), item.get("value"), item.get("effect")
        operator = item.get("operator")
        out.append(
            DeviceToleration(
                key if isinstance(key, str) else "",
                operator if isinstance(operator, str) and operator else "Equal",  # the API's default
                value if isinstance(value, str) else "",
                effect if isinstance(effect, str) else "",
                f"{at}.tolerations[{index}]",
                device_class,
            )
        )
    return out


def _capacity(alt: Mapping[str, Any]) -> int | None:
    value = _map(_map(alt.get("capacity")).get("requests")).get("memory")
    if value is None:
        return None
    try:
        return int(parse_quantity(value))
    except QuantityError:
        return None


def _cel_memory(expression: str) -> int | None:
    found = _CAPACITY.search(expression)
    if found is None:
        return None
    try:
        return int(parse_quantity(found.group(2)))
    except QuantityError:
        return None


def _profile_memory(profile: str) -> int | None:
    try:
        return mig_profile_memory_gib(profile) * GIB
    except ValueError:
        return None


def _sharing(claim_spec: Mapping[str, Any]) -> str | None:
    for config in _list(_map(claim_spec.get("devices")).get("config")):
        params = _map(_map(_map(config).get("opaque")).get("parameters"))
        strategy = _map(params.get("sharing")).get("strategy")
        if isinstance(strategy, str):
            return strategy
    return None


# --- the cluster objects claims are resolved through ----------------------------------------------------

CLAIM_KINDS = {
    ("resource.k8s.io", "ResourceClaimTemplate"): "claim_templates",
    ("resource.k8s.io", "ResourceClaim"): "claims",
    ("resource.k8s.io", "DeviceClass"): "device_classes",
    ("resource.k8s.io", "ResourceSlice"): "resource_slices",
}
"""(API group, kind) -> the ``Cluster`` map it feeds; every served version (v1, v1beta1, v1beta2)."""

COMPUTE_DOMAIN = ("resource.nvidia.com", "ComputeDomain")
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"


def cluster_entry(obj: Any, default_namespace: str = "default") -> tuple[str, Any, dict[str, Any]] | None:
    """Where a manifest belongs in the cluster view: (map name, key, object), or None.

    A ComputeDomain stands for the ResourceClaimTemplate its controller creates
    (``spec.channel.resourceClaimTemplate.name``, an IMEX channel): pods that name it are resolved, and
    recognised as holding no GPU through it."""
    if not isinstance(obj, dict) or not isinstance(obj.get("apiVersion"), str):
        return None
    group = obj["apiVersion"].rpartition("/")[0]
    meta = _map(obj.get("metadata"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else default_namespace
    kind = obj.get("kind")
    target = CLAIM_KINDS.get((group, kind)) if isinstance(kind, str) else None
    if target in ("device_classes", "resource_slices"):  # cluster-scoped
        return target, name, obj
    if target is not None:
        return target, (ns, name), obj
    if (group, kind) == COMPUTE_DOMAIN:
        channel = _map(_map(_map(obj.get("spec")).get("channel")).get("resourceClaimTemplate")).get("name")
        if isinstance(channel, str) and channel:
            template = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": channel, "namespace": ns},
                "spec": {
                    "spec": {
                        "devices": {"requests": [{"name": "channel", "exactly": {"deviceClassName": CHANNEL_CLASS}}]}
                    }
                },
            }
            return "claim_templates", (ns, channel), template
    return None
