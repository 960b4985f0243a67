"""Rules that keep a training job from starting half of its workers."""

from __future__ import annotations

from collections.abc import Iterable

from webhook.engine.context import Context, Finding
from webhook.engine.decision import Action
from webhook.engine.mutations.gang import (
    COSCHEDULING_GROUP,
    KUEUE_GROUP,
    KUEUE_QUEUE,
    KUEUE_TOTAL,
    VOLCANO_GROUP_NAME,
    VOLCANO_MIN_MEMBER,
    job_paths,
    scheduler_for,
)
from webhook.engine.mutations.scheduling import unset_scheduler
from webhook.engine.rules.resources import judged_pool
from webhook.engine.workload import Kind, dotted
from webhook.policy.model import GangBackend


def _get(obj: object, path: tuple) -> object:
    for part in path:
        if isinstance(obj, dict):
            obj = obj.get(part)
        elif isinstance(obj, list) and isinstance(part, int) and 0 <= part < len(obj):
            obj = obj[part]
        else:
            return None
    return obj


def _gang_missing(ctx: Context) -> str | None:
    """Why the (mutated) object would not be gang-scheduled, or None if it would."""
    gang, obj = ctx.gang, ctx.mutated or ctx.obj
    assert gang is not None
    kind = ctx.kind
    if gang.backend is GangBackend.NONE:
        return "its class has no gang backend"
    if gang.backend is GangBackend.VOLCANO:
        scheduler = scheduler_for(ctx)
        if kind is Kind.VOLCANO_JOB:
            actual = _get(obj, ("spec", "schedulerName"))
            return (
                None
                if actual in (None, scheduler)
                else f"spec.schedulerName is {actual!r}, not {scheduler!r}"
            )
        for state in ctx.states:
            actual = _get(obj, (*state.tpl.spec_path, "schedulerName"))
            if state.resolution is not None and actual != scheduler and not unset_scheduler(actual):
                return f"{state.tpl.dotted('spec', 'schedulerName')} is {actual!r}, not {scheduler!r}"
        if kind in (Kind.JOB, Kind.CRONJOB):
            meta, _ = job_paths(kind)
            if _get(obj, (*meta, "annotations", VOLCANO_MIN_MEMBER)) is None:
                return f"annotation {VOLCANO_MIN_MEMBER} is missing"
        if kind is Kind.POD and _get(obj, ("metadata", "annotations", VOLCANO_GROUP_NAME)) is None:
            return f"it has no gang name (annotation {ctx.policy.keys.gang})"
        return None
    if gang.backend is GangBackend.KUEUE:
        meta = ("metadata",) if kind is not Kind.CRONJOB else job_paths(kind)[0]
        if _get(obj, (*meta, "labels", KUEUE_QUEUE)) is None:
            return (
                f"no Kueue queue is configured for namespace {ctx.namespace!r} (set kueueQueue in the policy)"
            )
        if kind is Kind.POD and (
            _get(obj, ("metadata", "labels", KUEUE_GROUP)) is None
            or _get(obj, ("metadata", "annotations", KUEUE_TOTAL)) is None
        ):
            return f"it has no gang name (annotation {ctx.policy.keys.gang})"
        return None
    for state in ctx.states:
        if (
            state.resolution is not None
            and _get(obj, (*state.tpl.meta_path, "labels", COSCHEDULING_GROUP)) is None
        ):
            return f"label {COSCHEDULING_GROUP} is missing (the gang needs a name)"
    return None


from webhook.engine.rules.registry import rule  # noqa: E402


def _multi_pod(ctx: Context) -> bool:
    return ctx.gang is not None and (ctx.gang.size > 1 or (ctx.kind is Kind.VOLCANO_JOB and ctx.gang.size > 1))


@rule(
    "gang-required",
    Action.DENY,
    "multi-pod training without a gang (Job parallelism > 1, Volcano Job, gang-size > 1)",
    needs=("multi-pod",),
)
def gang_required(ctx: Context) -> Iterable[Finding]:
    primary = ctx.primary
    if primary is None or primary.cls is None or not primary.cls.gang.required or not _multi_pod(ctx):
        return
    why = _gang_missing(ctx)
    if why is not None:
        assert ctx.gang is not None
        yield Finding(
            "gang-required",
            primary.intent.class_path if primary.intent else "",
            f"{ctx.gang.size} pods of class {primary.class_name!r} must start together, but {why}",
            primary.class_name,
        )


@rule(
    "gang-incomplete",
    Action.DENY,
    "Volcano minAvailable < total replicas (all-or-nothing classes); gang-size != parallelism",
    needs=("gang",),
)
def gang_incomplete(ctx: Context) -> Iterable[Finding]:
    primary = ctx.primary
    if primary is None or primary.cls is None or ctx.gang is None:
        return
    cname = primary.class_name
    obj = ctx.mutated or ctx.obj
    intent = primary.intent
    size = ctx.gang.size
    if (
        intent is not None
        and intent.gang_size is not None
        and ctx.kind is not Kind.POD
        and intent.gang_size != size
    ):
        yield Finding(
            "gang-incomplete",
            intent.paths.get(ctx.policy.keys.gang_size, ""),
            f"gang-size {intent.gang_size} does not match the {size} pods the workload runs; "
            "remove the annotation (it is derived) or fix it",
            cname,
        )
    if not primary.cls.gang.all_or_nothing:
        return
    if ctx.kind is Kind.VOLCANO_JOB:
        min_available = _get(obj, ("spec", "minAvailable"))
        if isinstance(min_available, int) and min_available < size:
            yield Finding(
                "gang-incomplete",
                "spec.minAvailable",
                f"minAvailable {min_available} < {size} replicas: Volcano would start {min_available} "
                f"of {size} workers and leave the rest waiting; set minAvailable: {size}",
                cname,
            )
        for state in ctx.states:
            task = _get(obj, state.tpl.path[:-1])
            if not isinstance(task, dict):
                continue
            task_min = task.get("minAvailable")
            if isinstance(task_min, int) and task_min < state.tpl.replicas and state.resolution is not None:
                yield Finding(
                    "gang-incomplete",
                    dotted((*state.tpl.path[:-1], "minAvailable")),
                    f"task {state.tpl.task!r} minAvailable {task_min} < its {state.tpl.replicas} replicas; "
                    f"set it to {state.tpl.replicas} or remove it",
                    cname,
                )
    elif ctx.kind in (Kind.JOB, Kind.CRONJOB) and ctx.gang.backend is GangBackend.VOLCANO and size > 1:
        meta, _ = job_paths(ctx.kind)
        value = _get(obj, (*meta, "annotations", VOLCANO_MIN_MEMBER))
        if value is not None and str(value) != str(size):
            yield Finding(
                "gang-incomplete",
                dotted((*meta, "annotations", VOLCANO_MIN_MEMBER)),
                f"group-min-member {value} != parallelism {size}: the PodGroup would start a partial gang"
                f" (a gang cannot be resized; recreate the Job with parallelism {value} or fix the "
                "annotation)",
                cname,
            )
    elif ctx.kind is Kind.POD and ctx.gang.backend is GangBackend.KUEUE:
        total = _get(obj, ("metadata", "annotations", KUEUE_TOTAL))
        if (
            intent is not None
            and intent.gang_size is not None
            and total is not None
            and str(total) != str(intent.gang_size)
        ):
            yield Finding(
                "gang-incomplete",
                dotted(("metadata", "annotations", KUEUE_TOTAL)),
                f"pod-group-total-count {total} != gang-size {intent.gang_size}",
                cname,
            )


@rule(
    "gang-unschedulable", Action.DENY, "the gang needs more GPUs or nodes than the pool has", needs=("multi-pod",)
)
def gang_unschedulable(ctx: Context) -> Iterable[Finding]:
    primary = ctx.primary
    if primary is None or primary.cls is None or ctx.gang is None or ctx.gang.size <= 1:
        return
    # pods per pool as {devices per pod: pod count}: a Volcano task may say replicas: 6000000000, and
    # a list with one entry per pod would be a memory exhaustion (found by test_robustness)
    pods_by_pool: dict[str, dict[int, int]] = {}
    for state in ctx.states:
        pool = judged_pool(ctx, state)
        if pool is None or state.resolution is None:
            continue
        devices = state.judged.effective_devices()
        count = state.tpl.replicas if ctx.kind is Kind.VOLCANO_JOB else ctx.gang.size
        sizes = pods_by_pool.setdefault(pool.name, {})
        if count > 0:
            sizes[devices] = sizes.get(devices, 0) + count
    for name, pods in pods_by_pool.items():
        pool = ctx.policy.pools[name]
        if pool.spec.nodes is None:
            continue
        per_node = pool.spec.gpus_per_node
        total = sum(devices * count for devices, count in pods.items())
        capacity = pool.spec.nodes * per_node
        # the fewest nodes whole-device pods pack into; the same gang shapes recur, so remembered
        nodes = ctx.policy.recall(
            ("ffd", tuple(sorted(pods.items())), per_node),
            lambda pods=pods, per_node=per_node: first_fit_decreasing_bins(pods, per_node),  # type: ignore[misc]
        )
        if total > capacity or nodes > pool.spec.nodes:
            yield Finding(
                "gang-unschedulable",
                primary.intent.class_path if primary.intent else "",
                f"the gang needs {total} GPUs on {nodes} nodes but pool {name} has "
                f"{pool.spec.nodes} nodes x {per_node} GPUs ({capacity}); it would wait forever",
                primary.class_name,
            )


def first_fit_decreasing_bins(pods: dict[int, int], per_node: int) -> int:
    """How many nodes first-fit decreasing uses for ``pods`` ({devices per pod: count}).

    Exactly what placing pod by pod gives (every pod, largest first, into the first node with room,
    else a new node with ``per_node`` devices), computed per run of identical pods and identical
    nodes, so the cost does not grow with the pod count. Nodes are kept as runs ``[free, n]`` in
    opening order. Identical pods fill the first node that fits as far as it goes, then the next:
    a pod of ``s > 0`` devices fits ``free // s`` times into a node with ``free`` left; a pod of
    ``s <= 0`` never makes a node fuller, so all of them land in the first node that fits.
    """
    runs: list[list[int]] = []  # [free devices, number of nodes with that much free], in opening order
    for size in sorted(pods, reverse=True):
        left = pods[size]
        i = 0
        while left > 0 and i < len(runs):
            free, n = runs[i]
            if free < size:
                i += 1
                continue
            if size <= 0:
                runs[i:i + 1] = [[free - left * size, 1]] + ([[free, n - 1]] if n > 1 else [])
                left = 0
                break
            per = free // size  # pods each node of this run takes
            full, rest = divmod(left, per)
            if full >= n:  # every node of the run fills up
                runs[i] = [free - per * size, n]
                left -= per * n
                i += 1
                continue
            split = [[free - per * size, full]] if full else []
            if rest:
                split.append([free - rest * size, 1])
            remaining = n - full - (1 if rest else 0)
            if remaining:
                split.append([free, remaining])
            runs[i:i + 1] = split
            left = 0
        if left <= 0:
            continue
        # new nodes: the first pod opens one with per_node - size free, and it takes more while they fit
        if size <= 0:
            runs.append([per_node - left * size, 1])
            continue
        first_free = per_node - size
        per = 1 + (first_free // size if first_free >= size else 0)
        full, rest = divmod(left, per)
        if full:
            runs.append([per_node - per * size, full])
        if rest:
            runs.append([per_node - rest * size, 1])
    return sum(n for _, n in runs)
