"""scheduling-not-allowed: a priority or scheduler the user set that the class or entitlement does not grant.

A ``priorityClassName`` decides whom a pod may preempt; a ``schedulerName`` decides which scheduler
binds it, and so whether the gang, the queue and the pool's placement rules apply at all. The
mutation sets the class's own values only where the user set none, so what the user wrote is what
the apiserver stores: this rule judges it on every pod template as judged (stored, or after the
mutation offline) and on the object's own scheduling fields the kind table names (a Volcano Job's
``spec.schedulerName`` and ``spec.priorityClassName``, a PyTorchJob's
``runPolicy.schedulingPolicy.priorityClass``), the way Kyverno's ``restrict-scheduler-name`` and
Gatekeeper's allowed-priority-class policies do, but per class and per entitlement.

What is allowed:
- a class pod: the class's own ``priorityClassName`` and ``schedulerName``, the scheduler its gang
  backend sets (``volcano`` by default for Volcano), ``volcano`` on Volcano vGPU pools, the
  schedulers the object's own kind sets (a Volcano Job), the class's ``allowedPriorityClasses`` /
  ``allowedSchedulers``, and the default scheduler unless the class names another;
- any GPU pod: the scheduler a sharing stack's own webhook writes (HAMi's ``hami-scheduler``), exactly
  where it writes it: the policy has a pool of that stack (its webhook runs), the pod holds one of the
  stack's resources, and nothing else set a scheduler (no class, gang or stack scheduler; that webhook
  leaves a pod naming another scheduler alone). ``/validate`` judges the pod as stored after it;
- a raw GPU request (no class): the entitlement's ``allowedPriorityClasses`` / ``allowedSchedulers``.
  With no list it may set no priority class (the cluster's unnamed default applies) and only the
  default scheduler, plus the schedulers its kind sets and ``volcano`` for Volcano vGPU / GPU-share
  devices (no other scheduler accounts for them);
- ``system-node-critical`` / ``system-cluster-critical``: never on a GPU pod, whatever a list says
  (they outrank every workload and preempt anything on the node); a namespace that must run such
  pods is exempted from this rule (``rules.scheduling-not-allowed.exempt``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from webhook.engine.model.context import Context, Finding, TemplateState
from webhook.engine.model.gang import applies, backend_keys
from webhook.engine.model.scheduling import DEFAULT_SCHEDULER, unset_scheduler
from webhook.engine.model.workload import dotted
from webhook.engine.rules.registry import rule
from webhook.policy.compiled import Policy
from webhook.policy.kinds import CompiledKind, GangValue, Wild
from webhook.policy.model import Entitlement, GangBackend, WorkloadClass
from webhook.policy.stacks import stack, stacks, webhook_schedulers

SYSTEM_CRITICAL = frozenset({"system-node-critical", "system-cluster-critical"})
VOLCANO_GPU_SHARE = "volcano.sh/gpu-"
"""Volcano's older GPU-share device plugin (``volcano.sh/gpu-memory``, ``gpu-number``): not a sharing
stack a pool can name, but only the Volcano scheduler accounts for it."""


def _stack_schedulers(state: TemplateState) -> tuple[str, ...]:
    """Schedulers the template's devices need: the resolved stack's own, and for raw requests the one
    scheduler that accounts for a stack's resources (sharing_stacks.yaml ``setsScheduler``)."""
    res = state.resolution
    found = [res.scheduler] if res is not None and res.scheduler else []
    only = stacks().placed_only_by
    for c in state.judged.containers:
        for key in c.families:
            if key in only:
                found.append(only[key])
            elif key.startswith(VOLCANO_GPU_SHARE):
                found.append("volcano")
    return tuple(dict.fromkeys(found))


def _policy_webhook_schedulers(policy: Policy) -> dict[str, str]:
    """Resource -> scheduler that a sharing stack's own webhook writes, for the stacks the policy's pools
    use (sharing_stacks.yaml ``webhook.scheduler``): those webhooks run in the cluster."""
    used = frozenset(str(p.spec.sharing.provider) for p in policy.pools.values() if p.spec.sharing is not None)
    return webhook_schedulers(used)


def _gang_sets_scheduler(ctx: Context, state: TemplateState) -> bool:
    """Our gang step writes the backend's scheduler on this template (a gang of the kind's size, a key
    the backend reads there): the pod never reaches another webhook with the default scheduler."""
    gang = ctx.gang
    if gang is None or gang.backend is GangBackend.NONE or not state.tpl.gang:
        return False
    keys = backend_keys(ctx) or ()
    return any(k.value is GangValue.SCHEDULER and k.write and k.template and applies(ctx, k) for k in keys)


def _webhook_schedulers(ctx: Context, state: TemplateState, allowed: Allowed) -> tuple[str, ...]:
    """The schedulers another stack's webhook wrote on this pod before ``/validate``, exactly where it
    writes them: the pod holds one of that stack's resources, and would otherwise keep the default
    scheduler (no class scheduler, no gang scheduler our gang step writes, no stack scheduler our
    mutation sets, no scheduler of the kind's own controller). A pod sent elsewhere is left alone by
    that webhook, so a scheduler of its written there is the user's."""
    policy = ctx.policy
    if allowed.required is not None or ctx.workload.spec.schedulers:
        return ()
    table = policy.recall(("stack-webhook-schedulers",), lambda: _policy_webhook_schedulers(policy))
    if not table:
        return ()
    if _gang_sets_scheduler(ctx, state):
        return ()
    if state.resolution is not None and state.resolution.scheduler:
        return ()
    found = [table[key] for c in state.judged.containers for key in c.families if key in table]
    return tuple(dict.fromkeys(found))


@dataclass(frozen=True, slots=True)
class Allowed:
    """What one class (or one entitlement's raw requests) may set; built once per policy."""

    who: str  # "class 'batch'" / "raw GPU requests of entitlement 'everyone-else'"
    where: str  # the policy field that would allow more
    priorities: tuple[str, ...]
    schedulers: tuple[str, ...]  # besides the default scheduler, when that is allowed
    required: str | None  # the scheduler the class sets: the default one is not allowed then

    def priority_ok(self, value: str) -> bool:
        return value in self.priorities

    def scheduler_ok(self, value: str, extra: tuple[str, ...]) -> bool:
        if unset_scheduler(value):
            return self.required is None
        return value in self.schedulers or value in extra


def _gang_scheduler(cls: WorkloadClass) -> str | None:
    if cls.gang.backend is GangBackend.VOLCANO:
        return cls.gang.scheduler_name or "volcano"
    if cls.gang.backend is GangBackend.KAI:
        return cls.gang.scheduler_name or "kai-scheduler"
    return cls.gang.scheduler_name


def _for_class(policy: Policy, name: str, cls: WorkloadClass) -> Allowed:
    schedulers = [s for s in (cls.scheduler_name, _gang_scheduler(cls)) if s]
    for p in cls.pools:  # a stack only its own scheduler honours (Volcano vGPU): the mutation sets it
        pool = policy.pools.get(p)
        own = stack(pool.spec.sharing.provider) if pool is not None and pool.spec.sharing is not None else None
        if own is not None and own.spec.sets_scheduler and own.scheduler:
            schedulers.append(own.scheduler)
    schedulers.extend(cls.allowed_schedulers)
    priorities = [p for p in (cls.priority_class_name, *cls.allowed_priority_classes) if p]
    required = cls.scheduler_name if cls.scheduler_name and not unset_scheduler(cls.scheduler_name) else None
    return Allowed(
        who=f"class {name!r}",
        where=f"classes.{name}.allowedPriorityClasses / allowedSchedulers",
        priorities=tuple(dict.fromkeys(p for p in priorities if p not in SYSTEM_CRITICAL)),
        schedulers=tuple(dict.fromkeys(s for s in schedulers if not unset_scheduler(s))),
        required=required,
    )


def _for_entitlement(ent: Entitlement | None) -> Allowed:
    label = repr(ent.name) if ent is not None and ent.name else "(unnamed)"
    return Allowed(
        who=f"raw GPU requests (no workload class) of namespace rule {label}",
        where="the namespace rule's allowedPriorityClasses / allowedSchedulers",
        priorities=tuple(p for p in ent.allowed_priority_classes if p not in SYSTEM_CRITICAL) if ent else (),
        schedulers=tuple(s for s in ent.allowed_schedulers if not unset_scheduler(s)) if ent else (),
        required=None,
    )


def allowed_for(ctx: Context, state: TemplateState | None) -> Allowed | None:
    """What the template (None: the object) may set, or None when the rule has nothing to judge it by
    (an unknown class is intent-invalid already)."""
    policy = ctx.policy
    name = state.class_name if state is not None else _object_class(ctx)
    if name is not None:
        cls = policy.classes.get(name)
        if cls is None:
            return None
        return policy.recall(("scheduling-allowed", name), lambda: _for_class(policy, name, cls))
    ent = ctx.entitlement
    return policy.recall(("scheduling-allowed-raw", ctx.entitlement_key), lambda: _for_entitlement(ent))


def _object_class(ctx: Context) -> str | None:
    """The class that speaks for the object's own scheduling fields: the first template's that has one."""
    for state in ctx.states:
        if state.intent is not None and state.intent.class_name in ctx.policy.classes:
            return state.intent.class_name
    return None


def _judged(state: TemplateState) -> bool:
    """A GPU pod: one that declares a class, or holds GPU devices as judged."""
    return state.intent is not None or state.judged.has_gpu


def _object_fields(kind: CompiledKind) -> tuple[tuple[tuple[str | int, ...], GangValue], ...]:
    """The object's own (not per-template) scheduler and priority fields named in the kind table."""
    seen: dict[tuple, GangValue] = {}
    for keys in kind.backends.values():
        for key in keys:
            if key.template or key.value not in (GangValue.SCHEDULER, GangValue.PRIORITY_CLASS):
                continue
            if any(isinstance(p, Wild) for p in key.path):
                continue
            seen.setdefault(key.path, key.value)  # type: ignore[arg-type]
    return tuple(seen.items())


def _get(obj: object, path: tuple) -> object:
    for part in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _listed(values: tuple[str, ...], default: bool) -> str:
    names = ([DEFAULT_SCHEDULER] if default else []) + list(values)
    return ", ".join(names) if names else "none"


def _priority_finding(ctx: Context, allowed: Allowed, value: str, path: str, cname: str | None) -> Finding | None:
    if value in SYSTEM_CRITICAL:
        return Finding(
            "scheduling-not-allowed",
            path,
            f"priorityClassName {value!r} is reserved for cluster-critical components: a GPU pod with it "
            "outranks and preempts every workload on the node; remove it (only namespaces exempt from "
            "scheduling-not-allowed may use it)",
            cname,
        )
    if allowed.priority_ok(value):
        return None
    return Finding(
        "scheduling-not-allowed",
        path,
        f"priorityClassName {value!r} is not allowed for {allowed.who} "
        f"(allowed: {_listed(allowed.priorities, False)}): it would let the pod preempt workloads it may not; remove it"
        + (" to get the class's own" if cname is not None else "")
        + f", or have the platform team add it to {allowed.where}",
        cname,
    )


def _scheduler_finding(
    ctx: Context, allowed: Allowed, value: str, path: str, cname: str | None, extra: tuple[str, ...]
) -> Finding | None:
    if allowed.scheduler_ok(value, extra):
        return None
    if unset_scheduler(value):
        return Finding(
            "scheduling-not-allowed",
            path,
            f"schedulerName {value!r}: {allowed.who} is scheduled by {allowed.required!r}, and the default "
            f"scheduler skips its queue and gang; set schedulerName: {allowed.required} (or remove it)",
            cname,
        )
    names = tuple(dict.fromkeys((*allowed.schedulers, *extra)))
    return Finding(
        "scheduling-not-allowed",
        path,
        f"schedulerName {value!r} is not allowed for {allowed.who} (allowed: "
        f"{_listed(names, allowed.required is None)}): another scheduler ignores the platform's queues, "
        f"gangs and placement; remove it, or have the platform team add it to {allowed.where}",
        cname,
    )


@rule(
    "scheduling-not-allowed",
)
def scheduling_not_allowed(ctx: Context) -> Iterable[Finding]:
    kind_schedulers = ctx.workload.spec.schedulers
    judged_any = False
    for state in ctx.states:
        if not _judged(state):
            continue
        judged_any = True
        allowed = allowed_for(ctx, state)
        if allowed is None:
            continue
        spec, view, cname = state.view.spec, state.view, state.class_name
        # the usual answer (an allowed value) is settled before any path or message is built
        priority = spec.get("priorityClassName")
        if isinstance(priority, str) and priority and not allowed.priority_ok(priority):
            found = _priority_finding(ctx, allowed, priority, view.dotted("spec", "priorityClassName"), cname)
            if found is not None:
                yield found
        scheduler = spec.get("schedulerName")
        # absent: the apiserver defaults it (or the object's own is inherited); the Volcano-only
        # devices widen what is allowed, so they are looked at only when the kind's list is not enough
        if isinstance(scheduler, str) and not allowed.scheduler_ok(scheduler, kind_schedulers):
            extra = (*kind_schedulers, *_stack_schedulers(state), *_webhook_schedulers(ctx, state, allowed))
            found = _scheduler_finding(ctx, allowed, scheduler, view.dotted("spec", "schedulerName"), cname, extra)
            if found is not None:
                yield found
    if not judged_any:
        return
    fields = ctx.policy.recall(
        ("scheduling-fields", ctx.workload.spec.api_version, ctx.workload.spec.kind),
        lambda: _object_fields(ctx.workload),
    )
    if not fields:
        return
    allowed = allowed_for(ctx, None)
    if allowed is None:
        return
    obj = ctx.mutated or ctx.obj
    cname = _object_class(ctx)
    for path, value_kind in fields:
        value = _get(obj, path)
        if not isinstance(value, str) or not value:
            continue
        if value_kind is GangValue.PRIORITY_CLASS:
            found = _priority_finding(ctx, allowed, value, dotted(path), cname)
        else:
            found = _scheduler_finding(ctx, allowed, value, dotted(path), cname, kind_schedulers)
        if found is not None:
            yield found
