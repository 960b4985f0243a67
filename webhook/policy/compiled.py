"""The policy as the engine uses it: merged, cross-checked, with lookups precomputed once per load.

Everything here is derived from the validated ``PolicySpec`` so that the per-request path does no
parsing, no catalog search and no string building that could have been done at load time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, ClassVar, TypeVar

from webhook.actions import Enforcement
from webhook.policy.dra import DraCatalogue
from webhook.policy.dra import build as build_dra
from webhook.policy.kinds import CompiledKind, builtin_table, kind_table
from webhook.policy.model import (
    Entitlement,
    GPUModel,
    Isolation,
    PolicySpec,
    Pool,
    RuleSettings,
    Settings,
    WorkloadClass,
    mig_profile_memory_gib,
    mig_profile_slices,
    mig_resource_name,
)
from webhook.policy.stacks import stack, stacks
from webhook.quantity import GIB, parse_quantity

_ABSENT = object()
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    resource: str
    memory: int  # bytes usable in the GPU instance (nvidia-smi mig -lgip), not the name's number
    slices: int
    max: int
    per_gpu: int = 0  # instances per GPU on a pool's nodes (its geometry); 0 in the model's own list

    @property
    def plain(self) -> bool:
        """Plain profiles (no ``+me``/``-me``/``+gfx`` suffix) are the ones chosen by memory size."""
        return "+" not in self.name and "-" not in self.name


@dataclass(frozen=True, slots=True)
class CompiledModel:
    name: str
    memory: int  # bytes per card as nodes report it (GFD nvidia.com/gpu.memory): what requests must fit
    product: str | None
    profiles: tuple[Profile, ...]
    nominal: int = 0  # bytes in the product name (40Gi for an A100-40GB)
    layouts: dict[str, dict[str, int]] = field(default_factory=dict)  # mig-parted config -> profile: count

    @classmethod
    def build(cls, name: str, model: GPUModel) -> CompiledModel:
        profiles = tuple(
            Profile(
                name=p.name,
                resource=mig_resource_name(p.name),
                memory=int(parse_quantity(p.memory)) if p.memory is not None else mig_profile_memory_gib(p.name) * GIB,
                slices=mig_profile_slices(p.name),
                max=p.max,
            )
            for p in model.mig
        )
        nominal = int(parse_quantity(model.memory))
        usable = int(parse_quantity(model.usable_memory)) if model.usable_memory is not None else nominal
        return cls(name, usable, model.product, profiles, nominal, {k: dict(v) for k, v in model.layouts.items()})

    def geometry(self, pool: Pool) -> tuple[Profile, ...]:
        """The profiles a pool's nodes carry, each with its instances per GPU, smallest memory first.

        A layout names a mig-parted config; profiles with counts are taken as written; a plain list
        (or no geometry at all) means each profile up to the model's maximum."""
        mig = pool.mig
        if mig is None:
            return ()
        by_name = {p.name: p for p in self.profiles}
        if mig.layout is not None:
            counts = self.layouts.get(mig.layout, {})
        elif isinstance(mig.profiles, dict):
            counts = dict(mig.profiles)
        elif mig.profiles is not None:
            counts = {n: by_name[n].max for n in mig.profiles if n in by_name}
        else:
            counts = {p.name: p.max for p in self.profiles}
        chosen = [replace(by_name[n], per_gpu=c) for n, c in counts.items() if n in by_name and c > 0]
        return tuple(sorted(chosen, key=lambda p: (p.memory, p.slices)))


@dataclass(frozen=True, slots=True)
class CompiledPool:
    name: str
    spec: Pool
    gpu: CompiledModel
    profiles: tuple[Profile, ...]  # offered on this pool, smallest memory first
    tolerations: tuple[dict[str, object], ...]
    rdma_shm: int | None
    taints: tuple[tuple[str, str | None, str | None], ...] = ()
    """(key, value, effect) of the taints every node carries; ``None`` is "any" (derived from an ``Exists``
    toleration or one without effect). Read by the reachability model (``webhook.engine.model.reach``)."""
    offers: frozenset[str] = frozenset()
    """GPU and RDMA extended resources the pool's nodes advertise (its stack, MIG profiles, RDMA, ``offers``)."""
    dra_classes: frozenset[str] | None = frozenset()
    """DeviceClasses the pool's DRA driver serves (its ``dra:`` block and ``dra.serves``); ``None`` when
    the policy says nowhere which pools serve DRA, so any pool may serve any class."""
    dra_kinds: frozenset[tuple[str, str]] = frozenset()
    """(driver, kind) of the classes it serves: another class of the same driver and kind (a per-profile
    MIG class next to ``mig.nvidia.com``) selects the same devices, so the pool may serve it too."""
    dra_patterns: tuple[str, ...] = ()  # ".suffix" of ``*.suffix`` entries in ``dra.serves``

    def serves_class(self, name: str, driver: str, kind: str) -> bool:
        """The pool's nodes may serve a claim on DeviceClass ``name`` (over-approximated: never less)."""
        if self.dra_classes is None or name in self.dra_classes:
            return True
        if driver and (driver, kind) in self.dra_kinds:
            return True
        return any(name.endswith(suffix) for suffix in self.dra_patterns)

    @property
    def isolation(self) -> tuple[Isolation, ...]:
        return self.spec.isolation

    def smallest_profile(self, memory: Fraction) -> Profile | None:
        for profile in self.profiles:
            if profile.plain and profile.memory >= memory:
                return profile
        return None

    @property
    def largest_slice(self) -> int:
        plain = [p.memory for p in self.profiles if p.plain]
        return max(plain) if plain else self.gpu.memory


def _gpu_prefixes(declared: tuple[str, ...]) -> tuple[str, ...]:
    """The policy's GPU resource prefixes, plus every sharing stack's resources they do not cover: a
    stack's resources count as GPUs whatever the policy lists (a resource that escaped the GPU rules
    would reach a stack's nodes unjudged)."""
    missing = sorted(r for r in stacks().resources if not r.startswith(declared))
    return (*declared, *missing)


def _taints(pool: Pool) -> tuple[tuple[str, str | None, str | None], ...]:
    """The pool's taints: explicit, or one per toleration that names a key (what it was written to tolerate).

    An ``Exists`` toleration stands for a taint of any value and one without effect for a taint of any
    effect: the reachability model treats those unknowns as matching, so it over-approximates reach."""
    if pool.taints is not None:
        return tuple((t.key, t.value, t.effect) for t in pool.taints)
    out = []
    for t in pool.tolerations:
        if not t.key:
            continue  # a blanket toleration says nothing about which taints the nodes carry
        value = t.value if t.operator in (None, "Equal") else None
        out.append((t.key, value, t.effect))
    return tuple(out)


def _offers(pool: Pool, profiles: tuple[Profile, ...]) -> frozenset[str]:
    out: set[str] = set(pool.offers)
    if Isolation.EXCLUSIVE in pool.isolation:
        out.add("nvidia.com/gpu")
    if pool.mig is not None and Isolation.MIG in pool.isolation:
        if pool.mig.strategy == "single":
            out.add("nvidia.com/gpu")
        else:
            out.update(p.resource for p in profiles)
    if pool.sharing is not None and Isolation.SHARED in pool.isolation:
        # what the stack's device plugin advertises (sharing_stacks.yaml): a pod asking for one of these
        # can only bind where it is offered
        out.update(stack(pool.sharing.provider).offers(pool.sharing.renamed))
    if pool.rdma is not None and pool.rdma.resource is not None:
        out.add(pool.rdma.resource.name)
    return frozenset(out)


def _with_dra_reach(pools: dict[str, CompiledPool], dra: DraCatalogue) -> dict[str, CompiledPool]:
    """Each pool with what its DRA driver serves, for the reachability model.

    A pool with a ``dra:`` block serves its classes and ``serves`` (and the extended resources those
    classes map, KEP-5004); a pool without one serves none, once any pool of the policy says where DRA
    runs. A policy that names no DRA pool at all says nothing about it: every pool may serve every
    class (unknown reads as "can match")."""
    if not dra.pool_classes:
        return {n: replace(p, dra_classes=None) for n, p in pools.items()}
    out = {}
    for name, pool in pools.items():
        listed = dra.pool_classes.get(name, frozenset())
        exact = frozenset(c for c in listed if not c.startswith("*."))
        infos = [info for info in (dra.lookup(c) for c in exact) if info is not None]
        out[name] = replace(
            pool,
            dra_classes=exact,
            dra_kinds=frozenset((i.driver, i.kind.value) for i in infos if i.driver),
            dra_patterns=tuple(c[1:] for c in listed if c.startswith("*.")),
            offers=pool.offers | frozenset(i.extended for i in infos if i.extended),
        )
    return out


@dataclass(frozen=True, slots=True)
class IntentKeys:
    """The intent contract's keys under the policy's prefix (the keys users write)."""

    workload: str
    gpus: str
    gpu_memory: str
    isolation: str
    gpu_model: str
    pool: str
    rdma: str
    gang: str
    gang_size: str
    topology: str
    container: str
    annotations: frozenset[str] = frozenset()
    """Every key above but ``workload`` (a label): the ones read from annotations."""
    label_set: frozenset[str] = frozenset()
    """``workload``: the one key read from labels (a set, for the stray-key scan's lookup)."""

    @classmethod
    def for_prefix(cls, prefix: str) -> IntentKeys:
        names = {
            name: f"{prefix}/{name.replace('_', '-')}"
            for name in cls.__dataclass_fields__  # type: ignore[attr-defined]
            if name not in ("annotations", "label_set")
        }
        return cls(
            **names,
            annotations=frozenset(v for k, v in names.items() if k != "workload"),
            label_set=frozenset((names["workload"],)),
        )


@dataclass(frozen=True)
class Policy:
    """An immutable, ready-to-evaluate policy. Swapped as a whole on reload, never edited."""

    spec: PolicySpec
    settings: Settings
    models: dict[str, CompiledModel]
    pools: dict[str, CompiledPool]
    classes: dict[str, WorkloadClass]
    namespaces: tuple[Entitlement, ...]
    rules: dict[str, RuleSettings]
    keys: IntentKeys
    sources: tuple[str, ...] = ()
    digest: str = ""
    gpu_prefixes: tuple[str, ...] = ()
    fraction_keys: tuple[str, ...] = ()
    """Pod annotations that are a share of one GPU (``settings.gpuFractionAnnotations``)."""
    rdma_resources: frozenset[str] = frozenset()
    mig_resources: dict[str, tuple[str, ...]] = field(default_factory=dict)  # resource -> models offering it
    kinds: dict[tuple[str, str], CompiledKind] = field(default_factory=builtin_table)
    """(apiVersion, kind) -> the kind table's row: the built-ins and the policy's ``workloadKinds``."""
    dra: DraCatalogue = field(default_factory=DraCatalogue)
    """DeviceClass catalogue and the platform's ResourceClaimTemplates (``webhook.policy.dra``)."""
    device_taints: dict[str, str] = field(default_factory=dict)
    """Device taint key -> its effect (``None``, ``NoSchedule``, ``NoExecute``): the built-in NVIDIA health
    taints and the policy's ``deviceTaints``."""
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    """Results of pure functions of this policy and small request facts (see :meth:`recall`)."""

    MEMO_LIMIT: ClassVar[int] = 4096

    def recall(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The result for ``key``, computed by ``compute()`` the first time it is asked for.

        Only for results that depend on nothing but this policy and the key, and that no caller
        mutates: they are shared by every request that asks the same question. Keys start with a
        tag naming the question. The memo dies with the policy (a reload builds a new one), and it
        is bounded: hostile requests can make keys vary without limit, so when it is full it is
        emptied and refills with what traffic asks. A single ``get`` reads it, so a clear by
        another thread between a test and a read can never raise.
        """
        found = self.memo.get(key, _ABSENT)
        if found is _ABSENT:
            if len(self.memo) >= self.MEMO_LIMIT:
                self.memo.clear()
            found = self.memo[key] = compute()
        return found  # type: ignore[no-any-return]

    def enforcing(self) -> Policy:
        """This policy with ``settings.enforcement: enforce`` and ``settings.mutation: apply``: what its rules
        and its mutation do once rolled out. ``policy test`` judges suites so, whatever the rollout mode, so
        that a suite written for the platform's rules passes in every step of the rollout."""
        if self.settings.enforcement == Enforcement.ENFORCE and self.settings.mutation == "apply":
            return self
        settings = self.settings.model_copy(update={"enforcement": Enforcement.ENFORCE, "mutation": "apply"})
        return replace(self, settings=settings, spec=self.spec.model_copy(update={"settings": settings}), memo={})

    def __repr__(self) -> str:
        return f"Policy(digest={self.digest!r}, pools={sorted(self.pools)}, classes={sorted(self.classes)})"

    @classmethod
    def compile(cls, spec: PolicySpec, sources: tuple[str, ...] = (), raw: bytes = b"") -> Policy:
        from webhook.policy.catalog import BUILTIN_DEVICE_TAINTS, BUILTIN_GPU_MODELS

        settings = spec.settings or Settings()
        models = {
            name: CompiledModel.build(name, GPUModel.model_validate(data)) for name, data in BUILTIN_GPU_MODELS.items()
        }
        for name, model in spec.gpu_models.items():
            models[name] = CompiledModel.build(name, model)
        pools: dict[str, CompiledPool] = {}
        for name, pool in spec.pools.items():
            gpu = models[pool.gpu_model]
            offered = gpu.geometry(pool)
            shm = pool.rdma.shm_size if pool.rdma is not None else None
            pools[name] = CompiledPool(
                name=name,
                spec=pool,
                gpu=gpu,
                profiles=offered,
                tolerations=tuple(t.as_k8s() for t in pool.tolerations),
                rdma_shm=int(parse_quantity(shm)) if shm is not None else None,
                taints=_taints(pool),
                offers=_offers(pool, offered),
            )
        rdma = frozenset(p.spec.rdma.resource.name for p in pools.values() if p.spec.rdma and p.spec.rdma.resource)
        mig: dict[str, list[str]] = {}
        for model in models.values():
            for profile in model.profiles:
                mig.setdefault(profile.resource, []).append(model.name)
        dra, _ = build_dra(
            spec,
            {n: (p.gpu.memory, tuple((pr.name, pr.memory) for pr in p.profiles if pr.plain)) for n, p in pools.items()},
        )
        pools = _with_dra_reach(pools, dra)
        return cls(
            spec=spec,
            settings=settings,
            models=models,
            pools=pools,
            classes=dict(spec.classes),
            namespaces=spec.namespaces,
            rules=dict(spec.rules),
            keys=IntentKeys.for_prefix(settings.prefix),
            sources=sources,
            digest=hashlib.sha256(raw).hexdigest()[:12] if raw else "",
            gpu_prefixes=_gpu_prefixes(settings.gpu_resource_prefixes),
            fraction_keys=settings.gpu_fraction_annotations,
            rdma_resources=rdma | frozenset({"rdma/"}),
            mig_resources={k: tuple(v) for k, v in mig.items()},
            kinds=kind_table(spec.workload_kinds),
            dra=dra,
            device_taints={k: v["effect"] for k, v in BUILTIN_DEVICE_TAINTS.items()}
            | {k: v.effect for k, v in spec.device_taints.items()},
        )

    # --- entitlement -------------------------------------------------------------------------

    def entitlement(self, labels: dict[str, str]) -> Entitlement | None:
        """First namespace rule whose selector matches: ordered like a firewall, last one is the default."""
        index = self.entitlement_index(labels)
        return None if index is None else self.namespaces[index]

    def entitlement_index(self, labels: dict[str, str]) -> int | None:
        """Where in ``namespaces`` the entitlement of ``labels`` is (None: no rule matches)."""
        for index, rule in enumerate(self.namespaces):
            if rule.selector.matches(labels):
                return index
        return None

    def entitled_pools(self, entitlement: Entitlement | None, class_name: str | None) -> tuple[str, ...]:
        if entitlement is None:
            return ()
        names: list[str] = []
        classes = (class_name,) if class_name else entitlement.classes
        for cname in classes:
            if cname not in entitlement.classes or cname not in self.classes:
                continue
            for pool in self.classes[cname].pools:
                if entitlement.pools is not None and pool not in entitlement.pools:
                    continue
                if pool not in names:
                    names.append(pool)
        return tuple(names)

    def allowed_device_taints(
        self, entitlement: Entitlement | None, class_name: str | None = None, pool: str | None = None
    ) -> frozenset[str]:
        """Device taint keys a claim may tolerate: the class's and its pool's when the pod has them,
        else those of every class and pool the namespace is entitled to ('*': a blanket toleration too)."""
        if entitlement is None:
            return frozenset()
        if class_name is not None and class_name in self.classes:
            keys = set(self.classes[class_name].allowed_device_taints)
            if pool is not None and pool in self.pools:
                keys.update(self.pools[pool].spec.allowed_device_taints)
            return frozenset(keys)
        keys = set()
        for cname in entitlement.classes:
            if cname in self.classes:
                keys.update(self.classes[cname].allowed_device_taints)
        for name in self.entitled_pools(entitlement, None):
            keys.update(self.pools[name].spec.allowed_device_taints)
        return frozenset(keys)

    def is_gpu_resource(self, name: str) -> bool:
        return name.startswith(self.gpu_prefixes)

    def is_rdma_resource(self, name: str) -> bool:
        return name in self.rdma_resources or name.startswith("rdma/")
