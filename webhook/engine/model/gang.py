"""The workload's gang (the all-or-nothing group for Volcano, Kueue, coscheduling or KAI), as a model.

Rules and the gang mutation step both read it; neither derives it again.

The gang is derived from the workload with the kind table's pod count (Σ replicas of its templates;
a bare pod's ``gang``/``gang-size`` annotations), then spelled in the keys the kind's integration
with the class's backend reads (``CompiledKind.backends``). Values the user or another webhook
already set are kept; a *wrong* value is a validation finding, not an overwrite.
"""

from __future__ import annotations

from collections.abc import Iterator

from webhook.engine.model.context import Context, Gang
from webhook.engine.model.tasks import first_wave, tasks_of
from webhook.policy.kinds import CompiledKey, CompiledKind, GangValue, bind
from webhook.policy.model import GangBackend

VOLCANO_GROUP_NAME = "scheduling.k8s.io/group-name"
VOLCANO_MIN_MEMBER = "scheduling.volcano.sh/group-min-member"
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"  # Job annotation: partial admission
COSCHEDULING_GROUP = "scheduling.x-k8s.io/pod-group"
VOLCANO_JOB_NAME = "volcano.sh/job-name"
JOB_NAME = "batch.kubernetes.io/job-name"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_TAS = (KUEUE_PREFERRED, KUEUE_REQUIRED, "kueue.x-k8s.io/podset-unconstrained-topology")


def job_paths(kind: CompiledKind) -> tuple[tuple, tuple]:
    """(metadata path, spec path) of the batch Job inside the object (the kind's ``batchJob``; the object's
    own for every other kind)."""
    at = kind.batch_job or ()
    return (*at, "metadata"), (*at, "spec")


def pod_count(ctx: Context) -> int:
    """Pods in one gang: the gang-size intent (bare pods), else Σ replicas of the templates that join it
    (a negative count creates no pods, and is workload-invalid)."""
    if ctx.workload.spec.gang.size == "intent":
        primary = ctx.primary
        if primary is not None and primary.intent is not None and primary.intent.gang_size:
            return primary.intent.gang_size
        total = kueue_total(ctx.obj)  # the group the user spelled in Kueue's own keys
        return total if total is not None else 1
    if ctx.workload.spec.gang.size == "nodes":  # a DaemonSet: one pod per node of the pool it resolves to
        nodes = node_count(ctx)
        return nodes if nodes is not None else UNKNOWN_NODES
    return sum(s.tpl.replicas for s in ctx.states if s.tpl.gang)


UNKNOWN_NODES = 2
"""A per-node workload on a pool whose ``nodes`` the policy does not state: counted as more than one."""


def node_count(ctx: Context) -> int | None:
    """Nodes of the pools the templates resolve to (None: a pool does not declare ``nodes``)."""
    total = 0
    for state in ctx.states:
        res = state.resolution
        if res is None or not state.tpl.gang:
            continue
        if res.pool.spec.nodes is None:
            return None
        total += res.pool.spec.nodes
    return total


def _pod_meta(obj: dict, section: str) -> dict:
    meta = obj.get("metadata")
    values = meta.get(section) if isinstance(meta, dict) else None
    return values if isinstance(values, dict) else {}


def kueue_total(obj: dict) -> int | None:
    """A bare pod's ``kueue.x-k8s.io/pod-group-total-count`` when it is a valid count (ASCII digits, ≥ 1)."""
    value = _pod_meta(obj, "annotations").get(KUEUE_TOTAL)
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 9 and int(value) >= 1:
        return int(value)
    return None


def derive(ctx: Context) -> Gang | None:
    primary = ctx.primary
    if primary is None or primary.cls is None:
        return None
    backend = primary.cls.gang.backend
    size = pod_count(ctx)
    rules = ctx.workload.spec.gang
    name: str | None
    if rules.name == "intent":
        name = primary.intent.gang if primary.intent else None
        if name is None and backend is GangBackend.KUEUE:
            group = _pod_meta(ctx.obj, "labels").get(KUEUE_GROUP)  # the user named the group in Kueue's key
            name = group if isinstance(group, str) and group else None
    else:
        meta = ctx.obj.get("metadata") if isinstance(ctx.obj.get("metadata"), dict) else {}
        name = ctx.name if meta.get("name") else None  # generateName: the final name is not known at admission
    # Volcano's dependsOn: only the tasks created first can form the gang (see Gang.start)
    start = first_wave(tasks_of(ctx.obj, ctx.workload.tasks)) if ctx.workload.tasks is not None else None
    selector: dict[str, str] | None = None
    if name and rules.selector:
        selector = {rules.selector.replace("{prefix}", ctx.policy.settings.prefix): name}
    return Gang(backend=backend, name=name, size=size, selector=selector, start=start)


def backend_keys(ctx: Context) -> tuple[CompiledKey, ...] | None:
    """The keys the class's backend reads on this kind, or None when it has no integration for it."""
    assert ctx.gang is not None
    return ctx.workload.backends.get(ctx.gang.backend.value)


DEFAULT_SCHEDULERS = {GangBackend.VOLCANO: "volcano", GangBackend.KAI: "kai-scheduler"}


def scheduler_for(ctx: Context) -> str:
    primary = ctx.primary
    assert primary is not None and primary.cls is not None
    gang = primary.cls.gang
    return gang.scheduler_name or DEFAULT_SCHEDULERS.get(gang.backend, "volcano")


def queue_for(ctx: Context) -> str | None:
    """The queue of the class's backend: the namespace rule's, else the class's. Under Kueue the
    older ``kueueQueue`` spelling comes first at each level."""
    primary, ent = ctx.primary, ctx.entitlement
    cls = primary.cls if primary is not None else None
    kueue = cls is not None and cls.gang.backend is GangBackend.KUEUE
    if ent is not None and ((kueue and ent.kueue_queue) or ent.queue):
        return (ent.kueue_queue if kueue else None) or ent.queue
    if cls is None:
        return None
    return (cls.kueue_queue if kueue else None) or cls.gang.queue


def kueue_queue(ctx: Context) -> str | None:
    """The Kueue LocalQueue of the namespace rule, else the class (``kueueQueue``, then ``queue``)."""
    primary, ent = ctx.primary, ctx.entitlement
    if ent is not None and (ent.kueue_queue or ent.queue):
        return ent.kueue_queue or ent.queue
    cls = primary.cls if primary is not None else None
    return (cls.kueue_queue or cls.gang.queue) if cls is not None else None


def value_for(ctx: Context, key: CompiledKey, replicas: int | None = None) -> str | int | None:
    """What the webhook writes at ``key`` for this gang (None: not known, so not written)."""
    gang, primary = ctx.gang, ctx.primary
    assert gang is not None and primary is not None and primary.cls is not None
    if key.literal is not None:
        return key.literal
    value: str | int | None
    if key.value is GangValue.SCHEDULER:
        value = scheduler_for(ctx) if gang.backend in DEFAULT_SCHEDULERS else primary.cls.gang.scheduler_name
    elif key.value is GangValue.SIZE:
        value = gang.min_member
    elif key.value is GangValue.REPLICAS:
        value = replicas
    elif key.value is GangValue.NAME:
        value = gang.name
    elif key.value is GangValue.QUEUE:
        value = queue_for(ctx)
    else:
        value = primary.cls.priority_class_name
    if isinstance(value, int) and key.as_string:
        return str(value)
    return value


def applies(ctx: Context, key: CompiledKey) -> bool:
    gang = ctx.gang
    assert gang is not None
    return gang.size >= key.min_pods and (gang.name is not None or not key.needs_name)


def targets(ctx: Context, key: CompiledKey) -> Iterator[tuple[tuple[str | int, ...], int, str | None]]:
    """(concrete path, that template's replicas, its role) of every place ``key`` names in this object."""
    if key.template:
        for state in ctx.states:
            if state.tpl.gang and not state.tpl.virtual:
                yield (*state.tpl.path, *key.path), state.tpl.replicas, state.tpl.task  # type: ignore[misc]
        return
    if not key.wild:
        yield key.path, ctx.gang.size if ctx.gang is not None else 1, None  # type: ignore[misc]
        return
    seen: set[tuple] = set()
    for state in ctx.states:
        path = bind(key.path, state.tpl.bindings)
        if path is not None and path not in seen and state.tpl.gang:
            seen.add(path)
            yield path, state.tpl.replicas, state.tpl.task  # type: ignore[misc]
