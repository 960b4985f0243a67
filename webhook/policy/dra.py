"""Dynamic Resource Allocation as the policy knows it: the device-class catalogue and the platform's templates.

Two things are functions of the policy alone, so they are computed once per load:

- **the catalogue**: what each DeviceClass hands out (whole cards, MIG devices, capacity shares, or a
  device that is not a GPU), from the built-in entries (``webhook.policy.catalog``) overridden and
  extended by ``spec.deviceClasses``. Claims are judged through it, so the engine never guesses from a
  class name in a rule;
- **the platform's ResourceClaimTemplates**: for a pool with a ``dra:`` block, one template per size
  the pool can serve (a whole-GPU count, a MIG profile, a memory slice), named by the pool's naming
  rule. The mutation references them by name (nothing is created at admission); ``policy render``
  emits them for the entitled namespaces; and the engine resolves a claim on one of them without
  asking the cluster, since their content is the policy's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.policy.model import DeviceClass, DeviceClassKind, Isolation, PolicySpec, Pool
from webhook.quantity import GIB, MIB, parse_quantity

_PER_PROFILE = re.compile(r"^mig-([1-8])g-([0-9]+)gb(-me)?\.")


@dataclass(frozen=True, slots=True)
class ClassInfo:
    """One DeviceClass as the engine judges it."""

    name: str
    kind: DeviceClassKind
    driver: str | None = None
    profile: str | None = None
    memory: int | None = None  # bytes per device, when the class fixes it
    extended: str | None = None  # extendedResourceName
    source: str = "catalogue"  # catalogue | policy | cluster

    @property
    def gpu(self) -> bool:
        return self.kind is not DeviceClassKind.OTHER


def _info(name: str, entry: DeviceClass, source: str) -> ClassInfo:
    memory = int(parse_quantity(entry.memory)) if entry.memory is not None else None
    return ClassInfo(name, entry.kind, entry.driver, entry.profile, memory, entry.extended_resource_name, source)


def profile_from_name(name: str) -> str | None:
    """``mig-1g-12gb.gpu.nvidia.com`` -> ``1g.12gb``: NVIDIA's per-profile class naming."""
    match = _PER_PROFILE.match(name)
    if match is None:
        return None
    return f"{match.group(1)}g.{match.group(2)}gb" + ("+me" if match.group(3) else "")


@dataclass(frozen=True, slots=True)
class PlatformTemplate:
    """A ResourceClaimTemplate of the platform: one request of ``count`` devices of ``device_class``."""

    name: str
    pool: str
    isolation: Isolation
    device_class: str
    driver: str
    count: int = 1
    profile: str | None = None
    memory: int | None = None  # shared: the slice's memory in bytes

    def claim_spec(self) -> dict[str, Any]:
        """``spec.spec`` of the template (a ResourceClaimSpec, ``resource.k8s.io/v1``)."""
        exactly: dict[str, Any] = {"deviceClassName": self.device_class}
        if self.isolation is Isolation.EXCLUSIVE:
            exactly.update(allocationMode="ExactCount", count=self.count)
        elif self.isolation is Isolation.MIG and self.profile is not None:
            expression = f"device.attributes['{self.driver}'].profile == '{self.profile}'"
            exactly["selectors"] = [{"cel": {"expression": expression}}]
        elif self.isolation is Isolation.SHARED and self.memory is not None:
            exactly["capacity"] = {"requests": {"memory": memory_quantity(self.memory)}}
        return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}

    def manifest(self, namespace: str) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {
                "name": self.name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "gpu-admission"},
            },
            "spec": {"spec": self.claim_spec()},
        }


def memory_quantity(size: int) -> str:
    return f"{size // GIB}Gi" if size % GIB == 0 else f"{-(-size // MIB)}Mi"


def _memory_label(size: int) -> str:
    return memory_quantity(size).lower()


def _profile_label(profile: str) -> str:
    return profile.replace(".", "-").replace("+", "-")


def default_memory_sizes(card: int) -> tuple[int, ...]:
    """Powers of two GiB below the card, and the whole card: 1, 2, 4, 8, 16, 24 GiB on a 24 GiB card."""
    sizes, size = [], GIB
    while size < card:
        sizes.append(size)
        size *= 2
    sizes.append(card)
    return tuple(sizes)


@dataclass(frozen=True, slots=True)
class DraCatalogue:
    """The compiled DRA view of one policy (see the module docstring)."""

    exact: dict[str, ClassInfo] = field(default_factory=dict)
    patterns: tuple[tuple[str, ClassInfo], ...] = ()  # (suffix such as ".gpu.nvidia.com", entry), longest first
    drivers: dict[str, DeviceClassKind] = field(default_factory=dict)
    extended: dict[str, str] = field(default_factory=dict)  # extended resource -> class name
    templates: dict[str, PlatformTemplate] = field(default_factory=dict)  # by name
    pool_templates: dict[str, tuple[PlatformTemplate, ...]] = field(default_factory=dict)
    pool_classes: dict[str, frozenset[str]] = field(default_factory=dict)  # DeviceClasses each pool serves

    def lookup(self, name: str) -> ClassInfo | None:
        found = self.exact.get(name)
        if found is not None:
            return found
        for suffix, entry in self.patterns:
            if name.endswith(suffix) and len(name) > len(suffix):
                profile = entry.profile
                if entry.kind is DeviceClassKind.MIG and profile is None:
                    profile = profile_from_name(name)
                return ClassInfo(name, entry.kind, entry.driver, profile, entry.memory, entry.extended, entry.source)
        return None

    def template(
        self, pool: str, isolation: Isolation, *, count: int = 1, profile: str | None = None, memory: int | None = None
    ) -> PlatformTemplate | None:
        """The pool's template for a size: the count or profile exactly, the smallest slice >= ``memory``."""
        best: PlatformTemplate | None = None
        for tpl in self.pool_templates.get(pool, ()):
            if tpl.isolation is not isolation:
                continue
            if isolation is Isolation.EXCLUSIVE and tpl.count == count:
                return tpl
            if isolation is Isolation.MIG and tpl.profile == profile:
                return tpl
            fits = tpl.memory is not None and (memory is None or tpl.memory >= memory)
            if isolation is Isolation.SHARED and fits and (best is None or (best.memory or 0) > (tpl.memory or 0)):
                best = tpl
        return best

    def largest_slice(self, pool: str) -> int | None:
        sizes = [t.memory for t in self.pool_templates.get(pool, ()) if t.memory is not None]
        return max(sizes) if sizes else None


def _entries(spec: PolicySpec) -> dict[str, ClassInfo]:
    from webhook.policy.catalog import BUILTIN_DEVICE_CLASSES

    out = {
        name: _info(name, DeviceClass.model_validate(data), "catalogue")
        for name, data in BUILTIN_DEVICE_CLASSES.items()
    }
    for name, entry in spec.device_classes.items():
        out[name] = _info(name, entry, "policy")
    return out


def _pool_templates(
    name: str, pool: Pool, catalogue: DraCatalogue, card: int, profiles: tuple[tuple[str, int], ...]
) -> Iterator[tuple[tuple[str, ...], PlatformTemplate]]:
    """(policy path of the naming rule, template) for every size the pool serves through DRA."""
    dra = pool.dra
    if dra is None:
        return
    for isolation, class_name in dra.device_classes.items():
        info = catalogue.lookup(class_name)
        driver = (info.driver if info is not None else None) or "gpu.nvidia.com"
        rule = getattr(dra.templates, isolation.value)
        where = ("pools", name, "dra", "templates", isolation.value)
        base = {"pool": name, "isolation": isolation, "device_class": class_name, "driver": driver}
        if isolation is Isolation.EXCLUSIVE:
            for count in range(1, pool.gpus_per_node + 1):
                yield where, PlatformTemplate(name=rule.replace("{count}", str(count)), count=count, **base)
        elif isolation is Isolation.MIG:
            for profile, _memory in profiles:
                yield (
                    where,
                    PlatformTemplate(name=rule.replace("{profile}", _profile_label(profile)), profile=profile, **base),
                )
        else:
            sizes = (
                tuple(int(parse_quantity(q)) for q in dra.memory_sizes)
                if dra.memory_sizes is not None
                else default_memory_sizes(card)
            )
            for size in sorted(set(sizes)):
                yield where, PlatformTemplate(name=rule.replace("{memory}", _memory_label(size)), memory=size, **base)


def build(spec: PolicySpec, pools: dict[str, tuple[int, tuple[tuple[str, int], ...]]]) -> tuple[DraCatalogue, list]:
    """The catalogue and the problems a platform engineer must fix (path, message, hint).

    ``pools``: pool name -> (card memory in bytes, its plain MIG profiles as (name, bytes)), from the
    compiled GPU catalogue."""
    from webhook.policy.catalog import BUILTIN_DRA_DRIVERS

    entries = _entries(spec)
    exact = {n: e for n, e in entries.items() if not n.startswith("*.")}
    patterns = tuple(sorted(((n[1:], e) for n, e in entries.items() if n.startswith("*.")), key=lambda p: -len(p[0])))
    extended = {e.extended: n for n, e in exact.items() if e.extended}
    base = DraCatalogue(
        exact=exact,
        patterns=patterns,
        drivers={d: DeviceClassKind(k) for d, k in BUILTIN_DRA_DRIVERS.items()},
        extended=extended,
    )
    problems: list[tuple[tuple[Any, ...], str, str]] = []
    templates: dict[str, PlatformTemplate] = {}
    pool_templates: dict[str, tuple[PlatformTemplate, ...]] = {}
    pool_classes: dict[str, frozenset[str]] = {}
    wanted = {
        Isolation.EXCLUSIVE: (DeviceClassKind.WHOLE,),
        Isolation.MIG: (DeviceClassKind.MIG,),
        Isolation.SHARED: (DeviceClassKind.WHOLE, DeviceClassKind.SHARED),
    }
    for name, pool in spec.pools.items():
        if pool.dra is None:
            continue
        for isolation, class_name in pool.dra.device_classes.items():
            info = base.lookup(class_name)
            where = ("pools", name, "dra", "deviceClasses", isolation.value)
            if info is None:
                problems.append(
                    (
                        where,
                        f"unknown DeviceClass {class_name!r}",
                        "add it to spec.deviceClasses with its kind (whole, mig, shared)",
                    )
                )
            elif info.kind not in wanted[isolation]:
                problems.append(
                    (
                        where,
                        f"DeviceClass {class_name!r} hands out {info.kind.value} devices, "
                        f"which cannot serve isolation {isolation.value}",
                        f"use a class of kind {' or '.join(k.value for k in wanted[isolation])}",
                    )
                )
        card, profiles = pools.get(name, (0, ()))
        mine = []
        for where, tpl in _pool_templates(name, pool, base, card, profiles):
            other = templates.get(tpl.name)
            if other is not None and other.claim_spec() != tpl.claim_spec():
                problems.append(
                    (
                        where,
                        f"template name {tpl.name!r} is also pool {other.pool}'s, with other devices",
                        "give the pools different naming rules",
                    )
                )
                continue
            templates.setdefault(tpl.name, tpl)
            mine.append(tpl)
        pool_templates[name] = tuple(mine)
        pool_classes[name] = frozenset(pool.dra.device_classes.values()) | frozenset(pool.dra.serves)
    catalogue = DraCatalogue(
        exact=exact,
        patterns=patterns,
        drivers=base.drivers,
        extended=extended,
        templates=templates,
        pool_templates=pool_templates,
        pool_classes=pool_classes,
    )
    return catalogue, problems


def cluster_extended(device_classes: Mapping[str, Any]) -> dict[str, str]:
    """extended resource -> DeviceClass name, for the cluster's DeviceClass objects that map one
    (``spec.extendedResourceName``, KEP-5004): what ``policy render --cluster-objects`` forwards and
    ``policy lint --context`` compares with what the policy names."""
    out: dict[str, str] = {}
    for name, obj in device_classes.items():
        spec = obj.get("spec") if isinstance(obj, Mapping) else None
        value = spec.get("extendedResourceName") if isinstance(spec, Mapping) else None
        if isinstance(value, str) and value:
            out.setdefault(value, str(name))
    return out
