"""Rules on what containers ask of devices: the apiserver's extended-resource rules, MIG, mixing, sizes."""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

from webhook.engine.model.context import ClaimContext, Context, Finding, TemplateState
from webhook.engine.model.devices import (
    HAMI,
    MIG,
    PER_DEVICE,
    RDMA,
    SHARED,
    UNRESOLVED,
    WHOLE,
    ContainerResources,
    PodResources,
    effective,
    family,
    plain_count,
)
from webhook.engine.model.node_truth import advertised
from webhook.engine.model.pool_stack import families_on
from webhook.engine.rules import claim_entitlement
from webhook.engine.rules.claims import claim_profiles
from webhook.engine.rules.registry import CLAIM, POD, resolution_findings, rule
from webhook.policy import sizes
from webhook.policy.compiled import CompiledPool, Policy
from webhook.policy.model import Isolation
from webhook.policy.stacks import WHOLE_GPU, stacks
from webhook.quantity import QuantityError, format_bytes, parse_quantity


def _cpath(state: TemplateState, c: ContainerResources, *rest: str) -> str:
    return state.view.dotted("spec", c.group, c.index, *rest)


@rule(
    "extended-resource",
)
def extended_resource(ctx: Context) -> Iterable[Finding]:
    for state in ctx.states:
        for c in state.judged.containers:
            for key in c.families:
                limit, request = c.limits.get(key), c.requests.get(key)
                if key in PERCENT_KEYS:
                    yield from _percentage(state, c, key, limit)
                if plain_count(limit) and (request is None or request == limit):
                    continue  # "8" with no request or the same one: the usual, valid case
                parsed: dict[str, Fraction] = {}
                for section, value in (("limits", limit), ("requests", request)):
                    if value is None:
                        continue
                    try:
                        amount = parse_quantity(value)
                    except QuantityError as exc:
                        yield Finding(
                            "extended-resource",
                            _cpath(state, c, "resources", section, key),
                            str(exc),
                            state.class_name,
                        )
                        continue
                    if amount.denominator != 1 or amount < 0:
                        yield Finding(
                            "extended-resource",
                            _cpath(state, c, "resources", section, key),
                            f"{key} must be a whole, non-negative number, got {value!r}; devices cannot "
                            "be split by quantity (use MIG or a sharing class)",
                            state.class_name,
                        )
                        continue
                    parsed[section] = amount
                if request is not None and limit is None:
                    yield Finding(
                        "extended-resource",
                        _cpath(state, c, "resources", "requests", key),
                        f"{key} is requested without a limit; extended resources need limits "
                        f"(set limits[{key}]: {request})",
                        state.class_name,
                    )
                elif "limits" in parsed and "requests" in parsed and parsed["limits"] != parsed["requests"]:
                    yield Finding(
                        "extended-resource",
                        _cpath(state, c, "resources", "requests", key),
                        f"{key} request {request} must equal its limit {limit}",
                        state.class_name,
                    )


PERCENT_KEYS = stacks().percentages
"""The sharing stacks' per-card percentages (HAMi's gpumem-percentage and gpucores, Volcano vGPU's
memory percentage): above 100 no card can hold the slice (the stack's scheduler never binds it)."""


def _percentage(state: TemplateState, c: ContainerResources, key: str, limit: object) -> Iterable[Finding]:
    amount = c.amount(key)
    if amount is not None and amount > 100:
        yield Finding(
            "extended-resource",
            _cpath(state, c, "resources", "limits", key),
            f"{key} {limit} is above 100 (a percentage of one card): no card can hold it; set at most 100 "
            f"or ask for more devices ({PER_DEVICE.get(key, WHOLE_GPU)})",
            state.class_name,
        )


def _mig_devices(c: ContainerResources) -> int | Fraction:
    total: int | Fraction = 0
    for key, fam in c.families.items():
        if fam == MIG:
            raw = c.limits.get(key, c.requests.get(key))
            total += int(raw) if plain_count(raw) else (c.amount(key) or 0)  # type: ignore[arg-type]
    return total


def judged_pool(ctx: Context, state: TemplateState) -> CompiledPool | None:
    """The pool the template lands on: the resolved one, the one a raw request is pinned to, else the
    one its nodeSelector targets (a pinned raw request is held to the pool's limits like a class pod)."""
    if state.resolution is not None:
        return state.resolution.pool
    if state.pinned is not None:
        return ctx.policy.pools[state.pinned]
    if len(state.targeted_pools) == 1:
        return ctx.policy.pools[state.targeted_pools[0]]
    return None


@rule(
    "mig-profile-unavailable",
)
def mig_profile_unavailable(ctx: Context) -> Iterable[Finding]:
    policy = ctx.policy
    for state in ctx.states:
        if state.judged.claims:
            yield from claim_profiles(ctx, state)  # DRA claims: webhook.engine.rules.claims
        pool = judged_pool(ctx, state)
        for c in state.judged.containers:
            for key, fam in c.families.items():
                if fam != MIG:
                    continue
                if pool is not None:
                    offered = [p.resource for p in pool.profiles]
                    on_nodes = advertised(ctx.cluster, pool)  # known nodes win over the policy's geometry
                    if on_nodes is None and key not in offered:
                        valid = ", ".join(offered) or "none (the pool is not MIG-partitioned)"
                        yield Finding(
                            "mig-profile-unavailable",
                            _cpath(state, c, "resources", "limits", key),
                            f"pool {pool.name} ({pool.spec.gpu_model}) does not offer {key}; valid: {valid}",
                            state.class_name,
                        )
                    elif on_nodes is not None and key not in on_nodes:
                        # the nodes are the truth: the policy's geometry is what the platform believes
                        have = ", ".join(sorted(on_nodes)) or "no MIG devices"
                        yield Finding(
                            "mig-profile-unavailable",
                            _cpath(state, c, "resources", "limits", key),
                            f"no node of pool {pool.name} advertises {key} (they advertise {have}): the pod would "
                            "stay Pending; the pool's MIG geometry disagrees with its nodes "
                            "(policy lint --cluster-objects)",
                            state.class_name,
                        )
                elif key not in policy.mig_resources:
                    known = sorted({p.resource for pl in policy.pools.values() for p in pl.profiles})
                    yield Finding(
                        "mig-profile-unavailable",
                        _cpath(state, c, "resources", "limits", key),
                        f"no GPU model in the catalog offers {key}; profiles on this platform's pools: "
                        f"{', '.join(known) or 'none'}",
                        state.class_name,
                    )


@rule(
    "gpu-kind-mixed",
)
def gpu_kind_mixed(ctx: Context) -> Iterable[Finding]:
    for state in ctx.states:
        holders: list[ContainerResources] = []
        for c in state.judged.containers:
            fams = c.gpu_families
            if fams:
                holders.append(c)
            if len(fams - {UNRESOLVED}) > 1:
                keys = ", ".join(k for k, f in c.families.items() if f in (WHOLE, MIG, SHARED, HAMI))
                yield Finding(
                    "gpu-kind-mixed",
                    _cpath(state, c, "resources"),
                    f"{c.kind} {c.name!r} mixes device kinds ({keys}); a container gets whole GPUs or "
                    "one kind of slice, not both",
                    state.class_name,
                )
            mig = (_mig_devices(c) if MIG in fams else 0) + _claimed_mig(state.judged, c)
            if mig > 1:
                yield Finding(
                    "gpu-kind-mixed",
                    _cpath(state, c, "resources"),
                    f"{c.kind} {c.name!r} asks for {mig} MIG devices; only one is visible per container "
                    "(split the work across containers or use whole GPUs)",
                    state.class_name,
                )
        claimed = state.judged.claims and any(c.claim_refs for c in state.judged.containers)
        if state.resolution is not None and (
            claimed or (holders and (len(holders) > 1 or not _is_gpu_container(state, holders[0])))
        ):
            yield from _other_kind(ctx, state)


def _claimed_mig(pod: PodResources, c: ContainerResources) -> int:
    """MIG devices the container's own claims may give it (worst case over ``firstAvailable``)."""
    if not c.claim_refs:
        return 0
    return sum(r.count for _, requests in pod.claims_of(c) for r in requests if MIG in r.families)


FAMILY_NAMES = {WHOLE: "whole GPUs", MIG: "MIG devices", SHARED: "shared slices", HAMI: "HAMi slices"}


def _resolved_families(policy: Policy, state: TemplateState) -> frozenset[str] | None:
    """The device families the class pod's resolution gives its GPU container, as its pool reads them
    (None: not a class pod whose devices the webhook sets, e.g. an adopted raw request or a DRA claim)."""
    res = state.resolution
    if res is None or not res.resources or (state.intent is not None and state.intent.adopted_from is not None):
        return None
    return policy.recall(
        ("resolved-families", res.pool.name, tuple(res.resources)),
        lambda: families_on(
            res.pool,
            ContainerResources.gpu_families_of(
                {
                    k: f
                    for k in res.resources
                    if (f := family(k, gpu_prefixes=policy.gpu_prefixes, rdma=policy.rdma_resources)) is not None
                }
            ),
        ),
    )


def _other_kind(ctx: Context, state: TemplateState) -> Iterable[Finding]:
    """Another container of a class pod holding a device family the class did not give the pod: a whole
    card next to a MIG slice or a shared slice (or a slice next to exclusive cards) breaks the isolation
    the class promises, whichever container asks for it."""
    pod = state.judged
    allowed = _resolved_families(ctx.policy, state)
    if allowed is None:
        return
    res = state.resolution
    assert res is not None
    target = state.target()
    for c in pod.containers:
        # a claim the user added brings devices of its own, to the GPU container too
        claimed = pod.claim_families_of(c) - {UNRESOLVED} if c.claim_refs else frozenset()
        if not (c.gpu_families or claimed):
            continue
        plugin = families_on(res.pool, c.gpu_families) if (c.group, c.index) != target else frozenset()
        extra = (plugin | claimed) - allowed - {UNRESOLVED}
        if not extra:
            continue
        keys = ", ".join(
            [k for k, f in c.families.items() if f != RDMA and (c.group, c.index) != target]
            + [
                f"claim {claim.name!r}"
                for claim, requests in pod.claims_of(c)
                if any(r.families - allowed - {UNRESOLVED} for r in requests)
            ]
        )
        gpu = _gpu_container_name(state)
        kinds = ", ".join(FAMILY_NAMES.get(f, f) for f in sorted(extra))
        yield Finding(
            "gpu-kind-mixed",
            _cpath(state, c, "resources"),
            f"{c.kind} {c.name!r} asks for {kinds} ({keys}) in a pod of class {state.class_name!r}, whose "
            f"devices are {res.isolation.value} ({', '.join(res.resources)}) on pool {res.pool.name}: a pod "
            f"holds one kind of device; remove {keys} from {c.name!r} (the webhook gives the GPU container "
            f"{gpu!r} the pod's devices from its intent)",
            state.class_name,
        )


def _is_gpu_container(state: TemplateState, c: ContainerResources) -> bool:
    # the usual pod: its first container holds the devices and no other does (no call to target())
    if c.group == "containers" and c.index == 0 and (state.intent is None or state.intent.container is None):
        return True
    return (c.group, c.index) == state.target()


def _gpu_container_name(state: TemplateState) -> str:
    target = state.target()
    if target is None:
        return ""
    for c in state.judged.containers:
        if (c.group, c.index) == target:
            return c.name
    return ""


def _held(pod: PodResources, value, show, target: tuple[str, int] | None) -> tuple[str, ContainerResources | None]:
    """How ``value`` adds up over the pod's containers (the phase Kubernetes accounts), and the container
    other than the GPU container that adds the most to it (where the finding points)."""
    _, held = effective(pod.containers, value)
    parts = ", ".join(f"{show(value(c))} in {c.kind} {c.name!r}" for c in held)
    others = [c for c in held if (c.group, c.index) != target]
    other = max(others, key=value) if others else None  # the largest: the first thing to remove
    init = next((c for c in held if c.group == "initContainers" and not c.sidecar), None)
    if init is not None:
        parts = f"while init container {init.name!r} runs: {parts}"
    return parts, other


@rule(
    "gpu-count-exceeded",
    subjects=(POD, CLAIM),
)
def gpu_count_exceeded(ctx: Context | ClaimContext) -> Iterable[Finding]:
    if isinstance(ctx, ClaimContext):
        yield from claim_entitlement.count_findings(ctx)
        return
    yield from resolution_findings(ctx, "gpu-count-exceeded")
    for state in ctx.states:
        pod = state.judged
        gpus = pod.effective_gpus()
        if gpus == 0:
            continue
        cls = state.cls
        if cls is not None and cls.max_gpus is not None and gpus > cls.max_gpus:
            where, why = _counted(state, pod, ContainerResources.gpus)
            yield Finding(
                "gpu-count-exceeded",
                where,
                f"{gpus} GPUs per pod exceed class {state.class_name!r}'s maximum of {cls.max_gpus}{why}",
                state.class_name,
            )
        pool = judged_pool(ctx, state)
        devices = pod.effective_devices()
        if pool is not None and devices > pool.spec.gpus_per_node:
            where, why = _counted(state, pod, ContainerResources.whole_gpus)
            yield Finding(
                "gpu-count-exceeded",
                where,
                f"{devices} GPUs per pod can never fit pool {pool.name}'s {pool.spec.gpus_per_node} GPUs per node{why}",
                state.class_name,
            )
        most = cls.max_gpus if cls is not None else None
        if most is not None and state.judged.takes_all and (pool is None or pool.spec.gpus_per_node > most):
            yield Finding(
                "gpu-count-exceeded",
                state.view.dotted("spec", "resourceClaims"),
                f"a resource claim with allocationMode All takes every GPU of a node, more than class "
                f"{state.class_name!r}'s maximum of {most}; use allocationMode ExactCount",
                state.class_name,
            )


def _counted(state: TemplateState, pod: PodResources, value) -> tuple[str, str]:
    """(path, message tail) of a count finding: the containers that add up to it when more than the
    GPU container does (a sidecar's or an extra container's devices), and the fix."""
    target = state.target() if state.intent is not None else None
    parts, other = _held(pod, value, str, target)
    claims = [c for c in pod.claims if c.devices and not c.platform]  # the user's own claims
    for c in claims:
        parts += f"{', ' if parts else ''}{c.devices} in claim {c.name!r}"
    if other is None and claims:
        tail = f" (counted over the whole pod: {parts}); remove the claim {claims[0].name!r} or ask for fewer"
        return state.view.dotted("spec", "resourceClaims", claims[0].index), tail
    if other is None:
        return state.view.dotted("spec", "containers"), ""
    fix = (
        f"only the GPU container {_gpu_container_name(state)!r} gets devices: remove them from {other.name!r}"
        if target is not None
        else "ask for fewer or split the pod"
    )
    return _cpath(state, other, "resources"), f" (counted over the whole pod: {parts}); {fix}"


@rule(
    "gpu-memory-exceeded",
)
def gpu_memory_exceeded(ctx: Context) -> Iterable[Finding]:
    yield from resolution_findings(ctx, "gpu-memory-exceeded")
    for state in ctx.states:
        yield from _claim_memory(ctx, state)
    for state in ctx.states:
        res, intent = state.resolution, state.intent
        if res is None or intent is None or res.cls.max_gpu_memory is None:
            continue
        limit = parse_quantity(res.cls.max_gpu_memory)
        if res.memory is not None and res.memory > limit:
            yield Finding(
                "gpu-memory-exceeded",
                intent.path_of(ctx.policy.keys.gpu_memory, intent.class_path),
                f"{format_bytes(res.memory)} of GPU memory exceeds class {intent.class_name!r}'s "
                f"maximum of {format_bytes(limit)}",
                intent.class_name,
            )
            continue
        yield from _pod_memory(ctx, state, limit)


def _mig_memory(policy: Policy) -> dict[str, int]:
    """MIG resource name -> bytes of its profile, over every model of the catalog (remembered)."""
    return policy.recall(
        ("mig-memory",), lambda: {p.resource: p.memory for m in policy.models.values() for p in m.profiles}
    )


def _pod_memory(ctx: Context, state: TemplateState, limit: Fraction) -> Iterable[Finding]:
    """GPU memory of the whole pod against the class maximum: the GPU container's ``gpu-memory`` plus
    what every other container's devices hold (MIG profiles, each vendor's shared-memory unit, whole
    cards), added up as Kubernetes accounts a pod (:func:`webhook.engine.model.devices.effective`)."""
    res = state.resolution
    assert res is not None
    pod = state.judged
    target = state.target()
    gpu = next((c for c in pod.containers if (c.group, c.index) == target), None)
    mine = gpu is not None and _as_resolved(gpu, res.resources)
    # the user's own DRA claims that say their memory (the platform's claim is the GPU container's intent)
    claimed = [(cl, r) for cl in pod.claims if not cl.platform for r in cl.requests if r.memory is not None]
    if mine and not claimed and not any(c.gpu_families for c in pod.containers if c is not gpu):
        return  # the GPU container alone, holding what the webhook gave it: judged above
    card = res.pool.gpu.memory
    # the pool's own model first: the same profile name holds different memory on different models
    mig = {**_mig_memory(ctx.policy), **{p.resource: p.memory for p in res.pool.gpu.profiles}}
    asked = res.memory if res.memory is not None else 0

    def held(c: ContainerResources) -> Fraction | int:
        if c is gpu and mine:
            return asked  # the intent's gpu-memory, per device as above
        return c.gpu_memory(card, mig)

    total, _ = effective(pod.containers, held)
    total += sum(r.memory * r.count for _, r in claimed)  # type: ignore[operator]  # a claim is the pod's
    if total <= limit:
        return
    parts, other = _held(pod, held, format_bytes, target)
    for cl, r in claimed:
        parts += f"{', ' if parts else ''}{format_bytes(r.memory * r.count)} in claim {cl.name!r}"  # type: ignore[operator]
    if other is not None:
        where = _cpath(state, other, "resources")
    elif claimed:
        where = state.view.dotted("spec", "resourceClaims", claimed[0][0].index)
    else:
        where = state.view.dotted("spec", "containers")
    fix = (
        f"only the GPU container {gpu.name!r} gets GPU memory (from {ctx.policy.keys.gpu_memory}): remove the GPU "
        f"resources of {other.name!r}"
        if gpu is not None and other is not None
        else f"remove the claim {claimed[0][0].name!r} (the webhook sizes the GPU container's devices)"
        if claimed
        else f"ask for at most {format_bytes(limit)}"
    )
    yield Finding(
        "gpu-memory-exceeded",
        where,
        f"the pod holds {format_bytes(total)} of GPU memory ({parts}), above class {state.class_name!r}'s "
        f"maximum of {format_bytes(limit)}; {fix}",
        state.class_name,
    )


def _as_resolved(c: ContainerResources, resources: dict[str, str]) -> bool:
    """The GPU container holds exactly the device resources the resolution gives it (judged as stored:
    a later webhook or an UPDATE may have changed them, and then what it holds is what counts)."""
    held = {k: c.limits.get(k, c.requests.get(k)) for k, f in c.families.items() if f != RDMA}
    return held == resources


def _claim_memory(ctx: Context, state: TemplateState) -> Iterable[Finding]:
    """GPU memory a DRA claim asks for per device, against the class maximum and the pool's cards."""
    pod = state.judged
    for claim in pod.claims:
        if claim.platform:
            continue  # the webhook's own template: sized by resolution, judged there
        for request in claim.requests:
            if request.memory is None:
                continue
            where = state.view.dotted("spec", "resourceClaims", claim.index)
            cls = state.cls
            if cls is not None and cls.max_gpu_memory is not None:
                limit = parse_quantity(cls.max_gpu_memory)
                if request.memory > limit:
                    yield Finding(
                        "gpu-memory-exceeded",
                        where,
                        f"claim {claim.name!r} asks for {format_bytes(request.memory)} of GPU memory per device, "
                        f"above class {state.class_name!r}'s maximum of {format_bytes(limit)}",
                        state.class_name,
                    )
            pool = judged_pool(ctx, state)
            if pool is not None and request.memory > pool.gpu.memory:
                yield Finding(
                    "gpu-memory-exceeded",
                    where,
                    f"claim {claim.name!r} asks for {format_bytes(request.memory)} per device, more than the "
                    f"{format_bytes(pool.gpu.memory)} of pool {pool.name}'s {pool.spec.gpu_model}",
                    state.class_name,
                )


@rule(
    "whole-gpu-waste",
)
def whole_gpu_waste(ctx: Context) -> Iterable[Finding]:
    fraction = ctx.policy.settings.waste_fraction
    for state in ctx.states:
        res, intent = state.resolution, state.intent
        if res is not None and intent is not None and res.shared_card and intent.gpu_memory is not None:
            yield Finding(
                "whole-gpu-waste",
                intent.path_of(ctx.policy.keys.gpu_memory, intent.class_path),
                f"gpu-memory {format_bytes(intent.gpu_memory)} is not enforced: pool {res.pool.name} time-slices "
                f"whole {res.pool.spec.gpu_model} cards",
                intent.class_name,
            )
            continue
        if res is None or intent is None or res.isolation is not Isolation.EXCLUSIVE or res.memory is None:
            continue
        card = res.pool.gpu.memory
        if res.memory <= card * Fraction(fraction).limit_denominator(1000):
            share = int(res.memory * 100 / card)
            yield Finding(
                "whole-gpu-waste",
                intent.path_of(ctx.policy.keys.gpu_memory, intent.class_path),
                f"{format_bytes(res.memory)} on a whole {res.pool.spec.gpu_model} uses {share}% of its memory"
                + _smaller(ctx, res.cls, res.memory),
                intent.class_name,
            )


def _smaller(ctx: Context, cls, memory: Fraction) -> str:
    """The hint: only isolations the class allows, on its pools, that can hold ``memory`` (no `mig` on a T4)."""
    hints: list[str] = []
    for iso in (Isolation.MIG, Isolation.SHARED):
        if iso not in cls.isolation.permitted:
            continue
        for name in cls.pools:
            pool = ctx.policy.pools.get(name)
            if pool is None or iso not in pool.isolation:
                continue
            if iso is Isolation.MIG:
                profile = pool.smallest_profile(memory)
                if profile is not None:
                    hints.append(f"isolation mig (MIG {profile.name} on pool {name})")
                    break
            elif memory <= sizes.capacity(pool.spec, pool.gpu.memory, iso).bytes:
                hints.append(f"isolation shared (pool {name})")
                break
    return f"; use {' or '.join(hints)}" if hints else ""
