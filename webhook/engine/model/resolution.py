"""Resolution: class -> candidate pools (policy order) -> first pool that fits -> backend resource names.

Every candidate that is skipped gets a reason, so ``check --explain`` can say why a pool was not
taken, and a failed resolution reports the rule matching the first candidate's first reason.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from fractions import Fraction

from webhook.engine.model.devices import WHOLE_KEYS
from webhook.engine.model.intent import Intent
from webhook.policy import sizes
from webhook.policy.compiled import CompiledPool, Policy, Profile
from webhook.policy.dra import PlatformTemplate, memory_quantity
from webhook.policy.model import Entitlement, Isolation, WorkloadClass
from webhook.policy.stacks import stack
from webhook.quantity import MIB, format_bytes, parse_quantity


@dataclass(frozen=True, slots=True)
class Reason:
    rule: str
    text: str


@dataclass(slots=True)
class Resolution:
    cls: WorkloadClass
    pool: CompiledPool
    isolation: Isolation
    memory: Fraction | None
    resources: dict[str, str]  # resource -> quantity for the GPU container
    node_selector: dict[str, str]  # pool selector plus the single-strategy product label
    why: str  # how the backend names were chosen
    rdma: bool
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (pool, reason)
    device_bytes: int = 0
    device_name: str = ""
    cls_name: str = ""
    claim: PlatformTemplate | None = None  # DRA pools: the platform's template the pod's claim names
    claim_name: str = ""  # the pod resource claim's name
    profile: Profile | None = None  # MIG: the profile chosen (with its instances per GPU on the pool)
    pod_labels: dict[str, str] = field(default_factory=dict)  # labels the stack reads (ACK multi-card sharing)
    shared_card: bool = False  # time-slicing: the pod shares a whole card, its memory is not isolated
    scheduler: str | None = None  # the sharing stack's own scheduler, which the mutation sets (Volcano vGPU)


@dataclass(slots=True)
class Failure:
    rule: str
    path: str
    message: str


NAME_LABEL = "kubernetes.io/metadata.name"


def _how_to_grant(policy: Policy, class_name: str) -> str:
    """The fix for an entitlement denial: the namespace label of the first entitlement (in the policy's
    first-match order) that grants the class; remembered per policy."""

    def build() -> str:
        for ent in policy.namespaces:
            if class_name not in ent.classes:
                continue
            if not (ent.selector.match_labels or ent.selector.match_expressions):
                # granted to every namespace no earlier rule matches: this one's labels restrict it
                who = f" (entitlement {ent.name})" if ent.name else ""
                return (
                    f"namespaces that no earlier entitlement matches get it{who}: ask the platform team "
                    "to change this namespace's labels"
                )
            # the apiserver sets the name label to the namespace's name: a name to run in, not a label to set
            names = [v for k, v in ent.selector.match_labels.items() if k == NAME_LABEL]
            names += [v for r in ent.selector.match_expressions if r.key == NAME_LABEL and r.operator == "In"
                      for v in r.values]
            wanted = [f"{k}={v}" for k, v in ent.selector.match_labels.items() if k != NAME_LABEL]
            wanted += [f"{r.key} {r.operator} {','.join(r.values)}".strip() for r in ent.selector.match_expressions
                       if not (r.key == NAME_LABEL and r.operator == "In")]
            who = f" (entitlement {ent.name})" if ent.name else ""
            if names:
                which = f"namespace {names[0]}" if len(names) == 1 else f"namespaces {', '.join(names)}"
                labelled = f" labelled {' and '.join(wanted)}" if wanted else ""
                return (
                    f"only {which}{labelled}{who} gets it: run the workload there, or ask the platform team "
                    "to grant the class to this namespace"
                )
            return f"the namespace label {' and '.join(wanted)}{who} grants it: ask the platform team to set it"
        return "no namespace entitlement grants it: ask the platform team to add it to one"

    return policy.recall(("how-to-grant", class_name), build)


def resolve(
    policy: Policy,
    intent: Intent,
    entitlement: Entitlement | None,
    namespace: str,
    user_selector: dict[str, str],
    trace: list[str] | None,
) -> Resolution | Failure:
    cls = policy.classes.get(intent.class_name)
    if cls is None:
        close = difflib.get_close_matches(intent.class_name, list(policy.classes), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return Failure(
            "intent-invalid",
            intent.class_path,
            f"unknown workload class {intent.class_name!r}; {hint}classes: {', '.join(sorted(policy.classes))}",
        )
    if entitlement is None or intent.class_name not in entitlement.classes:
        allowed = ", ".join(entitlement.classes) if entitlement and entitlement.classes else "none"
        return Failure(
            "class-not-allowed",
            intent.class_path,
            f"namespace {namespace!r} is not entitled to class {intent.class_name!r} (entitled: {allowed}); "
            + _how_to_grant(policy, intent.class_name),
        )
    if intent.conflict is not None:
        return Failure("intent-invalid", *intent.conflict)
    ruled = entitlement.default_isolation.get(intent.class_name)
    isolation = intent.isolation or ruled or cls.isolation.default
    source = "intent" if intent.isolation is not None else "namespace rule default" if ruled else "class default"
    if intent.isolation is not None and intent.isolation not in cls.isolation.permitted:
        return Failure(
            "intent-invalid",
            intent.path_of(policy.keys.isolation, intent.class_path),
            f"class {intent.class_name!r} allows isolation {'/'.join(i.value for i in cls.isolation.permitted)}, "
            f"not {isolation.value!r}",
        )
    memory = intent.gpu_memory
    memory_source = "intent"
    if memory is None and cls.default_gpu_memory is not None and isolation is not Isolation.EXCLUSIVE:
        # Slices are sized by memory; a whole card is not, so the default never invents a waste figure.
        memory = parse_quantity(cls.default_gpu_memory)
        memory_source = "class defaultGPUMemory"
    if trace is not None:
        trace.append(
            f"isolation {isolation.value} ({source})"
            + (f", gpu-memory {format_bytes(memory)} ({memory_source})" if memory is not None else "")
        )
    if isolation is Isolation.MIG and intent.gpus > 1 and intent.adopted_from is None:
        return Failure(
            "intent-invalid",
            intent.path_of(policy.keys.gpus, intent.class_path),
            f"isolation mig gives one MIG device per pod (a container sees only one), but {intent.gpus} GPUs "
            "were asked; use isolation exclusive for several whole GPUs",
        )
    wants_rdma = intent.rdma if intent.rdma is not None else cls.rdma
    candidates = cls.pools
    if intent.pool is not None:
        if intent.pool not in cls.pools:
            return Failure(
                "class-not-allowed",
                intent.path_of(policy.keys.pool, intent.class_path),
                f"pool {intent.pool!r} is not a pool of class {intent.class_name!r} (pools: {', '.join(cls.pools)})",
            )
        candidates = (intent.pool,)
    entitled = entitlement.pools
    skipped: list[tuple[str, Reason]] = []
    for name in candidates:
        pool = policy.pools[name]
        reason = _misfit(policy, pool, intent, isolation, memory, entitled, user_selector)
        if reason is None and intent.rdma is True and pool.spec.rdma is None:
            reason = Reason("rdma-unavailable", "has no RDMA network")
        if reason is not None:
            skipped.append((name, reason))
            if trace is not None:
                trace.append(f"pool {name}: skipped, {reason.text}")
            continue
        result = _backend(policy, pool, intent, isolation, memory)
        result.cls = cls
        result.cls_name = intent.class_name
        result.rdma = bool(wants_rdma and pool.spec.rdma is not None)
        result.skipped = [(n, r.text) for n, r in skipped]
        if trace is not None:
            trace.append(f"pool {name}: taken ({pool.spec.gpu_model}, {pool.spec.gpus_per_node} GPUs/node)")
            trace.append(f"backend: {result.why}")
            if wants_rdma and pool.spec.rdma is None:
                trace.append(f"rdma: class wants it but pool {name} has none; skipped")
        return result
    _, first = skipped[0]
    detail = "; ".join(f"{n}: {r.text}" for n, r in skipped)
    path = intent.class_path
    if first.rule == "rdma-unavailable":
        path = intent.path_of(policy.keys.rdma, path)
    elif first.rule == "gpu-memory-exceeded":
        path = intent.path_of(policy.keys.gpu_memory, path)
    elif first.rule == "gpu-count-exceeded":
        path = intent.path_of(policy.keys.gpus, path)
    message = f"no pool of class {intent.class_name!r} fits ({detail})"
    if first.rule == "pool-spoofing":
        message += "; remove the conflicting nodeSelector: the webhook sets the pool's selector"
    if intent.isolation is None:
        message += _default_unserved(policy, intent, cls, entitlement, isolation, candidates)
    return Failure(first.rule, path, message)


def _default_unserved(
    policy: Policy,
    intent: Intent,
    cls: WorkloadClass,
    entitlement: Entitlement,
    isolation: Isolation,
    candidates: tuple[str, ...],
) -> str:
    """The fix when the isolation a pod got by default is served by no pool its namespace may use, but
    another isolation the class allows is: name it on the pod, or let the namespace rule default to it."""
    entitled = entitlement.pools
    usable = [policy.pools[n] for n in candidates if entitled is None or n in entitled]
    if any(isolation in p.spec.isolation for p in usable):
        return ""
    other = next(
        (iso for p in usable for iso in p.spec.isolation if iso in cls.isolation.permitted and iso is not isolation),
        None,
    )
    if other is None:
        return ""
    rule = repr(entitlement.name) if entitlement.name else "of this namespace"
    return (
        f"; isolation {isolation.value} is this namespace's default for class {intent.class_name!r}, and no pool "
        f"it may use serves it: add {policy.keys.isolation}: {other.value} to the pod, or ask the platform team "
        f"to set defaultIsolation: {{{intent.class_name}: {other.value}}} on namespace rule {rule}"
    )


def _misfit(
    policy: Policy,
    pool: CompiledPool,
    intent: Intent,
    isolation: Isolation,
    memory: Fraction | None,
    entitled: tuple[str, ...] | None,
    user_selector: dict[str, str],
) -> Reason | None:
    spec = pool.spec
    if entitled is not None and pool.name not in entitled:
        return Reason("class-not-allowed", "namespace is not entitled to this pool")
    if intent.gpu_model is not None and intent.gpu_model != spec.gpu_model:
        return Reason("intent-invalid", f"GPU model is {spec.gpu_model}, not {intent.gpu_model}")
    if isolation not in spec.isolation:
        return Reason("intent-invalid", f"does not serve isolation {isolation.value}")
    for key, value in spec.node_selector.items():
        if key in user_selector and user_selector[key] != value:
            return Reason(
                "pool-spoofing",
                f"user nodeSelector {key}={user_selector[key]} conflicts with the pool's {key}={value}",
            )
    if intent.gpus > spec.gpus_per_node:
        return Reason("gpu-count-exceeded", f"{intent.gpus} GPUs per pod > {spec.gpus_per_node} per node")
    if isolation is Isolation.SHARED and intent.gpus > 1 and intent.adopted_from is None:
        several = _several_shared(pool)
        if several is not None:
            return Reason("intent-invalid", several)
    if memory is not None:
        if isolation is Isolation.MIG:
            if pool.smallest_profile(memory) is None:
                largest = max((p for p in pool.profiles if p.plain), key=lambda p: p.memory, default=None)
                held = f"largest {largest.name}: {memory_quantity(largest.memory)}" if largest else "no plain profile"
                return Reason(
                    "gpu-memory-exceeded",
                    f"no MIG profile on the pool's {spec.gpu_model} nodes holds {format_bytes(memory)} ({held}); "
                    f"ask for at most {memory_quantity(largest.memory) if largest else '0'}",
                )
        elif memory > (cap := sizes.capacity(spec, pool.gpu.memory, isolation)).bytes:
            named = (
                f", the memory its nodes report, not the {format_bytes(pool.gpu.nominal)} of the name"
                if pool.gpu.nominal != cap.bytes
                else ""
            )
            return Reason(
                "gpu-memory-exceeded",
                f"{format_bytes(memory)} exceeds what a {spec.gpu_model} of the pool gives one pod: at most "
                f"{cap.text}{named}; ask for at most {memory_quantity(cap.bytes)}",
            )
        elif isolation is Isolation.SHARED and _dra_class(pool, isolation) is not None:
            largest = policy.dra.largest_slice(pool.name)
            if largest is not None and memory > largest:
                return Reason(
                    "gpu-memory-exceeded",
                    f"{format_bytes(memory)} exceeds the largest slice the pool serves ({format_bytes(largest)})",
                )
    elif intent.adopted_from is None and (
        isolation is Isolation.MIG
        or (
            isolation is Isolation.SHARED
            and spec.sharing is not None
            and stack(spec.sharing.provider).isolates_memory
        )
        or (isolation is Isolation.SHARED and _dra_class(pool, isolation) is not None)
    ):
        return Reason(
            "intent-invalid",
            f"isolation {isolation.value} is sized by {policy.keys.gpu_memory}, which is not set",
        )
    return None


def _several_shared(pool: CompiledPool) -> str | None:
    """Why the pool cannot give one pod shares of several cards (``None``: its stack can).

    The stack's table entry says how it does (HAMi: ``nvidia.com/gpu: N`` with ``nvidia.com/gpumem``
    per card; Volcano vGPU: ``volcano.sh/vgpu-number: N``; ACK cGPU multi-card sharing: the pod label
    ``aliyun.com/gpu-count: N`` with ``aliyun.com/gpu-mem`` the total) or why it cannot."""
    spec = pool.spec
    if spec.dra is not None and Isolation.SHARED in spec.dra.device_classes:
        return "the pool's DRA template gives one shared device per claim; use isolation exclusive for several cards"
    if spec.sharing is None:
        return None
    return stack(spec.sharing.provider).several_cards_refused()


def _dra_class(pool: CompiledPool, isolation: Isolation) -> str | None:
    dra = pool.spec.dra
    return dra.device_classes.get(isolation) if dra is not None else None


def _dra_backend(
    policy: Policy, pool: CompiledPool, intent: Intent, isolation: Isolation, memory: Fraction | None
) -> Resolution | None:
    """DRA pools: a claim on the platform's template for this size instead of extended resources."""
    if intent.adopted_from is not None or _dra_class(pool, isolation) is None:
        return None
    spec = pool.spec
    assert spec.dra is not None
    device_bytes, device_name = pool.gpu.memory, f"whole {spec.gpu_model}"
    wanted = format_bytes(memory) if memory is not None else "?"
    if isolation is Isolation.EXCLUSIVE:
        template = policy.dra.template(pool.name, isolation, count=intent.gpus)
        detail = f"{intent.gpus} x whole {spec.gpu_model}"
    elif isolation is Isolation.MIG:
        profile = pool.smallest_profile(memory) if memory is not None else None
        assert profile is not None
        template = policy.dra.template(pool.name, isolation, profile=profile.name)
        device_bytes, device_name = profile.memory, f"MIG {profile.name} of {spec.gpu_model}"
        detail = f"{wanted} on {spec.gpu_model} -> MIG {profile.name}, the smallest profile >= {wanted}"
    else:
        template = policy.dra.template(pool.name, isolation, memory=int(memory) if memory is not None else None)
        if template is not None and template.memory is not None:
            device_bytes = template.memory
            device_name = f"{format_bytes(template.memory)} DRA slice of {spec.gpu_model}"
        detail = f"{wanted} shared by consumable capacity"
    assert template is not None  # every size resolution admits has a template (webhook.policy.dra)
    return Resolution(
        cls=None,  # type: ignore[arg-type]  # filled in by resolve()
        pool=pool,
        isolation=isolation,
        memory=memory,
        resources={},
        node_selector=dict(spec.node_selector),
        why=f"DRA: {detail} -> claim {spec.dra.claim_name} on ResourceClaimTemplate {template.name} "
        f"({template.device_class})",
        rdma=False,
        device_bytes=device_bytes,
        device_name=device_name,
        claim=template,
        claim_name=spec.dra.claim_name,
        profile=pool.smallest_profile(memory) if isolation is Isolation.MIG and memory is not None else None,
    )


def _backend(
    policy: Policy, pool: CompiledPool, intent: Intent, isolation: Isolation, memory: Fraction | None
) -> Resolution:
    claimed = _dra_backend(policy, pool, intent, isolation, memory)
    if claimed is not None:
        return claimed
    spec = pool.spec
    selector = dict(spec.node_selector)
    resources: dict[str, str]
    labels: dict[str, str] = {}
    shared_card = False
    scheduler: str | None = None
    device_bytes, device_name = pool.gpu.memory, f"whole {spec.gpu_model}"
    profile: Profile | None = None
    if intent.adopted_from is not None:
        resources = {}
        why = f"resources kept as written (raw request adopted into pool {pool.name})"
    elif isolation is Isolation.EXCLUSIVE:
        resources = {"nvidia.com/gpu": str(intent.gpus)}
        why = f"exclusive: {intent.gpus} x whole {spec.gpu_model} -> nvidia.com/gpu: {intent.gpus}"
    elif isolation is Isolation.MIG:
        assert spec.mig is not None
        profile = pool.smallest_profile(memory) if memory is not None else None
        assert profile is not None
        device_bytes, device_name = profile.memory, f"MIG {profile.name} of {spec.gpu_model}"
        wanted = format_bytes(memory) if memory is not None else "?"
        if spec.mig.strategy == "mixed":
            resources = {profile.resource: "1"}
            why = f"{wanted} on {spec.gpu_model} -> {profile.resource}, the smallest profile >= {wanted}"
        else:
            resources = {"nvidia.com/gpu": "1"}
            product = f"{pool.gpu.product}-MIG-{profile.name}"
            selector["nvidia.com/gpu.product"] = product
            why = (
                f"{wanted} on {spec.gpu_model} -> MIG {profile.name} (single strategy): nvidia.com/gpu: 1 "
                f"on nodes labelled nvidia.com/gpu.product={product}"
            )
    else:
        assert spec.sharing is not None
        resources, labels, device_bytes, device_name, why, shared_card = _shared_backend(
            pool, intent.gpus, memory
        )
        own = stack(spec.sharing.provider)
        scheduler = own.scheduler if own.spec.sets_scheduler else None
    return Resolution(
        cls=None,  # type: ignore[arg-type]  # filled in by resolve()
        pool=pool,
        isolation=isolation,
        memory=memory,
        resources=resources,
        node_selector=selector,
        why=why,
        rdma=False,
        device_bytes=device_bytes,
        device_name=device_name,
        profile=profile if isolation is Isolation.MIG and intent.adopted_from is None else None,
        pod_labels=labels,
        shared_card=shared_card,
        scheduler=scheduler,
    )


def _shared_backend(
    pool: CompiledPool, n: int, memory: Fraction | None
) -> tuple[dict[str, str], dict[str, str], int, str, str, bool]:
    """What a shared slice is written as on the pool's stack, read from its table entry: (resources,
    pod labels, bytes per device, device name, why, shares a whole card)."""
    spec = pool.spec
    assert spec.sharing is not None
    st = stack(spec.sharing.provider)
    entry = st.spec
    unit = st.memory_unit
    if unit is None:  # the stack meters no memory: access to a shared card (time-slicing)
        name = entry.renamed if spec.sharing.renamed and entry.renamed else entry.resources[0]
        why = f"{spec.gpu_model} shared by {st.title} -> {name}: 1 (access to a shared card, not a share of it)"
        return {name: "1"}, {}, pool.gpu.memory, f"{spec.gpu_model} shared by {st.title}", why, True
    size, resource = unit
    mem = memory if memory is not None else Fraction(pool.gpu.memory)
    amount = sizes.units(spec, mem)
    unit_name = "MiB" if size == MIB else "GiB"
    resources: dict[str, str] = {}
    labels: dict[str, str] = {}
    several = n > 1 and entry.several_cards is not None
    if entry.count is not None and entry.several_cards == "count":
        resources[entry.count.resource] = str(n)
    per_device = entry.memory is not None and entry.memory.per_device
    resources[resource] = str(amount if per_device or not several else amount * n)
    if entry.cores is not None and spec.sharing.cores is not None:
        resources[entry.cores] = str(spec.sharing.cores)
    written = ", ".join(f"{k}: {v}" for k, v in resources.items())
    if per_device:
        how = f"{unit_name} per {'card' if entry.count is None or entry.count.resource in WHOLE_KEYS else 'vGPU'}"
    else:
        how = f"{unit_name}, rounded up" + (f" per card x {n} cards" if several else "")
    why = f"{format_bytes(mem)} shared via {st.title} -> {written} ({how})"
    if several and entry.several_cards == "podLabel" and entry.pod_label:
        labels = {entry.pod_label: str(n)}
        why += f", pod label {entry.pod_label}: {n} (multi-card sharing)"
    return resources, labels, amount * size, f"{st.id} slice of {spec.gpu_model}", why, False
