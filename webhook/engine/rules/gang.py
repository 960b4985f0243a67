"""Rules that keep a training job from starting half of its workers."""

from __future__ import annotations

from collections.abc import Iterable

from webhook.engine.model.context import Context, Finding, TemplateState
from webhook.engine.model.gang import (
    COSCHEDULING_GROUP,
    KUEUE_GROUP,
    KUEUE_MIN_PARALLELISM,
    KUEUE_QUEUE,
    KUEUE_TOTAL,
    VOLCANO_GROUP_NAME,
    VOLCANO_MIN_MEMBER,
    backend_keys,
    job_paths,
    kueue_queue,
    node_count,
    targets,
    value_for,
)
from webhook.engine.model.scheduling import unset_scheduler
from webhook.engine.model.tasks import (
    default_min_available,
    depends_on,
    first_wave,
    task_name,
    task_replicas,
    tasks_of,
)
from webhook.engine.model.workload import dotted
from webhook.engine.rules.resources import judged_pool
from webhook.policy.kinds import CompiledKey, GangValue
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
    if gang.backend is GangBackend.NONE:
        return "its class has no gang backend"
    if ctx.workload.spec.gang.carrier == "template":
        return _template_gang_missing(ctx)
    keys = backend_keys(ctx)
    if keys is None:
        others = [b for b in ctx.workload.backends if b != gang.backend.value]
        can = f"use a class whose gang backend is {' or '.join(others)}" if others else "no gang backend integrates it"
        return f"{gang.backend.value} has no integration for {ctx.workload.name} ({can})"
    for key in keys:
        if gang.size < key.min_pods:
            continue
        if key.needs_name and gang.name is None:
            if ctx.workload.spec.gang.name == "intent":
                return _no_gang_name(ctx)
            return "it has no name yet (generateName): the gang needs metadata.name"
        if not key.write:
            continue
        for path, replicas, _ in targets(ctx, key):
            expected = value_for(ctx, key, replicas)
            actual = _get(obj, path)
            if key.value is GangValue.QUEUE and (gang.backend is not GangBackend.KUEUE or actual is not None):
                continue  # Volcano and KAI gang without one (their default queue); only Kueue needs the label
            if key.value is GangValue.QUEUE and expected is None:
                return f"no Kueue queue is configured for namespace {ctx.namespace!r} (set kueueQueue in the policy)"
            if key.value is GangValue.SCHEDULER:
                if expected is None or actual == expected:
                    continue
                if actual is None or (key.template and unset_scheduler(actual)):
                    continue  # the pods inherit it (Volcano Job) or our mutation sets it
                return f"{dotted(path)} is {actual!r}, not {expected!r}"
            if actual is None and expected is not None:
                where = path[-2] if len(path) > 1 and path[-2] in ("labels", "annotations") else None
                return f"{where[:-1]} {path[-1]} is missing" if where else f"{dotted(path)} is missing"
    return None


def _template_gang_missing(ctx: Context) -> str | None:
    """A controller that creates plain Pods from its template (Deployment, StatefulSet, ReplicaSet,
    DaemonSet). The webhook mutates those Pods, never the controller, so the gang must already be
    spelled where the backend reads it on a Pod, on the template the Pods are copied from (Volcano:
    also the owner's ``group-min-member``, which Volcano turns into one PodGroup for the owner's pods),
    or in the gang intent (``gang`` + ``gang-size``), from which the webhook writes those keys on
    every Pod it admits."""
    gang, keys = ctx.gang, ctx.policy.keys
    assert gang is not None
    for state in ctx.states:
        if not state.tpl.gang or state.intent is None or state.cls is None:
            continue
        intent = state.intent
        if intent.gang is not None and intent.gang_size is not None and intent.gang_size > 1:
            continue  # written on every Pod (a gang-size other than the pod count is gang-incomplete)
        view = state.view
        labels = view.metadata.get("labels") if isinstance(view.metadata.get("labels"), dict) else {}
        annotations = view.metadata.get("annotations") if isinstance(view.metadata.get("annotations"), dict) else {}
        scheduler = view.spec.get("schedulerName")
        group = "<name>" if gang.backend is GangBackend.KUEUE else "<your PodGroup>"
        intent_fix = f"or annotate the template with {keys.gang}: {group} and {keys.gang_size}: {gang.size}"
        if gang.backend is GangBackend.VOLCANO:
            want = state.cls.gang.scheduler_name or "volcano"
            owner = _get(ctx.obj, ("metadata", "annotations", VOLCANO_MIN_MEMBER))
            if VOLCANO_GROUP_NAME not in annotations and owner is None:
                return (
                    f"its pods join no Volcano PodGroup: annotate the {ctx.workload.name} with "
                    f"{VOLCANO_MIN_MEMBER}: \"{gang.size}\" (Volcano makes one PodGroup of its pods) or the "
                    f"pod template with {VOLCANO_GROUP_NAME}: <your PodGroup>, and set the template's "
                    f"schedulerName: {want}; {intent_fix}"
                )
            if scheduler != want:
                where = view.dotted("spec", "schedulerName")
                shown = "not set" if unset_scheduler(scheduler) else f"{scheduler!r}"
                return f"{where} is {shown}, not {want!r}: Volcano never sees the pods; set schedulerName: {want}"
        elif gang.backend is GangBackend.KUEUE:
            if KUEUE_GROUP not in labels or KUEUE_TOTAL not in annotations:
                return (
                    f"its pods form no Kueue pod group: label the pod template {KUEUE_GROUP}: <name> and "
                    f"annotate it {KUEUE_TOTAL}: \"{gang.size}\"; {intent_fix}"
                )
            if KUEUE_QUEUE not in labels and kueue_queue(ctx) is None:
                return f"no Kueue queue is configured for namespace {ctx.namespace!r} (set kueueQueue in the policy)"
        elif gang.backend is GangBackend.COSCHEDULING:
            want = state.cls.gang.scheduler_name
            if COSCHEDULING_GROUP not in labels:
                return (
                    f"its pods join no PodGroup: label the pod template {COSCHEDULING_GROUP}: <your PodGroup "
                    f"with minMember {gang.size}>" + (f" and set schedulerName: {want}" if want else "")
                    + f"; {intent_fix}"
                )
            if want and scheduler != want:
                where = view.dotted("spec", "schedulerName")
                shown = "not set" if unset_scheduler(scheduler) else f"{scheduler!r}"
                return f"{where} is {shown}, not {want!r}: the coscheduling plugin never sees the pods"
    return None


def _template_gang_sizes(ctx: Context, cname: str | None) -> Iterable[Finding]:
    """The pod counts a controller's own pod-group keys state, against the pods it runs."""
    gang = ctx.gang
    assert gang is not None
    if ctx.workload.spec.gang.size == "nodes" and node_count(ctx) is None:
        return  # one pod per node of a pool whose size the policy does not state: nothing to compare
    size, kind = gang.size, ctx.workload.name
    counted = "nodes of its pool" if ctx.workload.spec.gang.size == "nodes" else "replicas"
    if gang.backend is GangBackend.VOLCANO:
        value = _get(ctx.obj, ("metadata", "annotations", VOLCANO_MIN_MEMBER))
        if isinstance(value, str) and value != str(size):
            yield Finding(
                "gang-incomplete",
                dotted(("metadata", "annotations", VOLCANO_MIN_MEMBER)),
                f"{VOLCANO_MIN_MEMBER} {value} != the {size} {counted} of the {kind}: Volcano would "
                f"start a partial group or wait forever; set it to \"{size}\"",
                cname,
            )
    elif gang.backend is GangBackend.KUEUE:
        for state in ctx.states:
            annotations = state.view.metadata.get("annotations")
            value = annotations.get(KUEUE_TOTAL) if isinstance(annotations, dict) else None
            if isinstance(value, str) and value != str(size):
                yield Finding(
                    "gang-incomplete",
                    state.view.dotted("metadata", "annotations", KUEUE_TOTAL),
                    f"{KUEUE_TOTAL} {value} != the {size} {counted} of the {kind}: Kueue would admit a "
                    f"partial group or wait forever; set it to \"{size}\"",
                    cname,
                )


def _no_gang_name(ctx: Context) -> str:
    key = ctx.policy.keys.gang
    primary = ctx.primary
    if primary is not None and primary.intent is not None and primary.intent.has(key):
        return f"its gang name (annotation {key}) is invalid (see intent-invalid)"
    return f"it has no gang name (annotation {key})"


from webhook.engine.rules.registry import rule  # noqa: E402


def _multi_pod(ctx: Context) -> bool:
    return ctx.gang is not None and ctx.gang.size > 1


@rule(
    "gang-required",
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
            f"{_pods(ctx, primary)} of class {primary.class_name!r} must start together, but {why}",
            primary.class_name,
        )


def _pods(ctx: Context, primary: TemplateState) -> str:
    assert ctx.gang is not None
    if ctx.workload.spec.gang.size != "nodes":
        return f"{ctx.gang.size} pods"
    pool = primary.resolution.pool if primary.resolution is not None else None
    nodes = node_count(ctx)
    where = f"pool {pool.name}" if pool is not None else "its pool"
    counted = f", {nodes} nodes" if nodes is not None else ""
    return f"the pods of a {ctx.workload.name} (one per node of {where}{counted}; run workers as a Job kind)"


@rule(
    "gang-incomplete",
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
        and ctx.workload.spec.gang.size != "intent"
        and intent.gang_size != size
        and not (ctx.workload.spec.gang.size == "nodes" and node_count(ctx) is None)
    ):
        yield Finding(
            "gang-incomplete",
            intent.path_of(ctx.policy.keys.gang_size, ""),
            f"gang-size {intent.gang_size} does not match the {size} pods the workload runs; "
            "remove the annotation (it is derived) or fix it",
            cname,
        )
    if not primary.cls.gang.all_or_nothing:
        return
    if ctx.workload.tasks is not None:
        # the gang that can form: every pod, or with dependsOn the pods of the tasks created first
        target = ctx.gang.min_member
        min_available = _get(obj, ("spec", "minAvailable"))
        if isinstance(min_available, int) and not isinstance(min_available, bool) and 0 < min_available < target:
            counted = (
                f"{target} replicas" if ctx.gang.start is None else f"the {target} pods of the tasks without dependsOn"
            )
            yield Finding(
                "gang-incomplete",
                "spec.minAvailable",
                f"minAvailable {min_available} < {counted}: Volcano would start {min_available} of "
                f"{target} workers and leave the rest waiting; set minAvailable: {target}",
                cname,
            )
        for index, task in enumerate(tasks_of(obj, ctx.workload.tasks)):
            task_min, replicas = task.get("minAvailable"), task_replicas(task)
            if isinstance(task_min, int) and not isinstance(task_min, bool) and 0 <= task_min < replicas:
                yield Finding(
                    "gang-incomplete",
                    dotted(("spec", "tasks", index, "minAvailable")),
                    f"task {task_name(task, index)!r} minAvailable {task_min} < its {replicas} replicas: "
                    f"Volcano would start {task_min} of them; set it to {replicas} or remove it",
                    cname,
                )
    elif ctx.workload.spec.gang.carrier == "template":  # apps controllers: the keys on the template
        yield from _template_gang_sizes(ctx, cname)
    else:  # every other kind: the keys the kind table says its backends read
        if ctx.workload.spec.gang.size == "intent" and (intent is None or intent.gang_size is None):
            return  # a bare pod without gang-size: nothing to compare the backend's count with
        yield from _partial_gang(ctx, obj, size, cname)


def _checked_keys(ctx: Context) -> list[CompiledKey]:
    """Keys whose present value must cover the gang: the class backend's, plus the workload's own
    gang fields (a Volcano Job's minAvailable, a PyTorchJob's schedulingPolicy.minAvailable), which
    its controller reads whatever the class's backend."""
    assert ctx.gang is not None
    wanted = ctx.workload.backends.get(ctx.gang.backend.value) or ()
    out: list[CompiledKey] = [k for k in wanted if k.check != "none"]
    seen = {k.path for k in out}
    for keys in ctx.workload.backends.values():
        for key in keys:
            if key.check != "none" and not key.as_string and key.path not in seen:
                seen.add(key.path)
                out.append(key)
    return out


def _partial_gang(ctx: Context, obj: dict, size: int, cname: str | None) -> Iterable[Finding]:
    for key in _checked_keys(ctx):
        if size < key.min_pods:
            continue
        for path, replicas, role in targets(ctx, key):
            value = _get(obj, path)
            if value is None:
                continue
            expected = replicas if key.value is GangValue.REPLICAS else size
            leaf = str(path[-1]).rsplit("/", 1)[-1]
            where = dotted(path)
            if key.check == "below" and isinstance(value, int) and not isinstance(value, bool) and value < expected:
                if key.value is GangValue.REPLICAS:
                    yield Finding(
                        "gang-incomplete",
                        where,
                        f"{'task ' + repr(role) + ' ' if role else ''}{leaf} {value} < its {expected} replicas; "
                        f"set it to {expected} or remove it",
                        cname,
                    )
                else:
                    yield Finding(
                        "gang-incomplete",
                        where,
                        f"{leaf} {value} < {expected} {key.size_name}: the gang would start {value} of "
                        f"{expected} pods and leave the rest waiting; set {leaf}: {expected}",
                        cname,
                    )
            elif key.check == "differs" and str(value) != str(expected):
                yield Finding(
                    "gang-incomplete",
                    where,
                    f"{leaf} {value} != {key.size_name} {expected}: the gang would start a partial group "
                    f"(a gang cannot be resized; set it to {expected} or remove it)",
                    cname,
                )


@rule(
    "gang-unschedulable",
    needs=("gang",),
)
def gang_unschedulable(ctx: Context) -> Iterable[Finding]:
    primary = ctx.primary
    if primary is None or primary.cls is None or ctx.gang is None:
        return
    if ctx.workload.tasks is not None:
        yield from _volcano_never_forms(ctx, primary.class_name)
    elif ctx.workload.batch_job is not None:
        yield from _kueue_partial_admission(ctx, primary)
    if ctx.gang.size > 1:
        yield from _beyond_capacity(ctx, primary)


def _volcano_never_forms(ctx: Context, cname: str | None) -> Iterable[Finding]:
    """A Volcano Job whose gang minimum counts pods that will not exist when the gang must form."""
    obj = ctx.mutated or ctx.obj
    tasks = tasks_of(obj, ctx.workload.tasks or ())
    total = sum(task_replicas(t) for t in tasks)
    for index, task in enumerate(tasks):
        name, replicas = task_name(task, index), task.get("replicas")
        if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas < 0:
            yield Finding(
                "gang-unschedulable",
                dotted(("spec", "tasks", index, "replicas")),
                f"task {name!r} has replicas {replicas}: it creates no pods, so a gang counting it never "
                f"forms; set replicas to the number of pods the task runs",
                cname,
            )
        task_min = task.get("minAvailable")
        if (
            isinstance(task_min, int)
            and not isinstance(task_min, bool)
            and task_min > task_replicas(task)
        ):
            yield Finding(
                "gang-unschedulable",
                dotted(("spec", "tasks", index, "minAvailable")),
                f"task {name!r} minAvailable {task_min} > its {task_replicas(task)} replicas: Volcano waits "
                f"for pods that are never created and the job never starts; set minAvailable: "
                f"{task_replicas(task)} or raise replicas to {task_min}",
                cname,
            )
    declared = _get(obj, ("spec", "minAvailable"))
    explicit = isinstance(declared, int) and not isinstance(declared, bool) and declared > 0
    minimum = declared if explicit else default_min_available(tasks)  # what Volcano would default to
    assert isinstance(minimum, int)
    if explicit and minimum > total:
        yield Finding(
            "gang-unschedulable",
            "spec.minAvailable",
            f"minAvailable {minimum} > the {total} pods the tasks create: the gang can never form and "
            f"Volcano never starts the job; set minAvailable: {total} or raise the tasks' replicas",
            cname,
        )
        return
    start = first_wave(tasks)
    if start is not None and minimum > start:
        waiting = [task_name(t, i) for i, t in enumerate(tasks) if depends_on(t)]
        index = next(i for i, t in enumerate(tasks) if depends_on(t))
        where = "spec.minAvailable" if explicit else dotted(("spec", "tasks", index, "dependsOn"))
        yield Finding(
            "gang-unschedulable",
            where,
            f"the gang of {minimum} pods counts task(s) {', '.join(waiting)} with dependsOn, whose pods "
            f"Volcano creates only after the tasks they depend on run: the gang never forms; set "
            f"minAvailable: {start} (the pods of the tasks without dependsOn) or remove dependsOn",
            cname,
        )


def _kueue_partial_admission(ctx: Context, primary: TemplateState) -> Iterable[Finding]:
    """``kueue.x-k8s.io/job-min-parallelism`` lets Kueue admit and start part of a Job."""
    assert primary.cls is not None and ctx.gang is not None
    if not primary.cls.gang.all_or_nothing:
        return
    obj = ctx.mutated or ctx.obj
    meta, _ = job_paths(ctx.workload)
    value = _get(obj, (*meta, "annotations", KUEUE_MIN_PARALLELISM))
    if value is None:
        return
    managed = ctx.gang.backend is GangBackend.KUEUE or _get(obj, (*meta, "labels", KUEUE_QUEUE)) is not None
    if not managed:
        return
    size = ctx.gang.size
    count = int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else None
    if count is not None and count >= size:
        return  # not below parallelism (an out-of-range value is workload-invalid)
    yield Finding(
        "gang-unschedulable",
        dotted((*meta, "annotations", KUEUE_MIN_PARALLELISM)),
        f"{KUEUE_MIN_PARALLELISM} {value} lets Kueue admit the Job with fewer than its {size} pods "
        f"(partial admission) and start them without the rest; class {primary.class_name!r} is "
        "all-or-nothing: remove the annotation",
        primary.class_name,
    )


def _beyond_capacity(ctx: Context, primary: TemplateState) -> Iterable[Finding]:
    assert ctx.gang is not None
    # pods per (pool, MIG profile or None) as {devices per pod: pod count}: a Volcano task may say replicas:
    # 6000000000, and a list with one entry per pod would be a memory exhaustion (found by test_robustness)
    pods_by_pool: dict[tuple[str, str | None], dict[int, int]] = {}
    per_gpu: dict[tuple[str, str | None], int] = {}
    for state in ctx.states:
        pool = judged_pool(ctx, state)
        if pool is None or state.resolution is None:
            continue
        profile = state.resolution.profile
        devices = state.judged.effective_devices()
        count = ctx.gang.size if ctx.workload.spec.gang.size == "intent" else state.tpl.replicas
        key = (pool.name, profile.name if profile is not None else None)
        per_gpu[key] = profile.per_gpu if profile is not None else 1
        sizes = pods_by_pool.setdefault(key, {})
        if count > 0:
            sizes[devices] = sizes.get(devices, 0) + count
    for (name, profile_name), pods in pods_by_pool.items():
        pool = ctx.policy.pools[name]
        if pool.spec.nodes is None:
            continue
        # a MIG pod takes one instance of its profile: a node has GPUs x the layout's instances of it
        per_node = pool.spec.gpus_per_node * per_gpu[(name, profile_name)]
        total = sum(devices * count for devices, count in pods.items())
        capacity = pool.spec.nodes * per_node
        # the fewest nodes whole-device pods pack into; the same gang shapes recur, so remembered
        nodes = ctx.policy.recall(
            ("ffd", tuple(sorted(pods.items())), per_node),
            lambda pods=pods, per_node=per_node: first_fit_decreasing_bins(pods, per_node),  # type: ignore[misc]
        )
        if total > capacity or nodes > pool.spec.nodes:
            what = (
                f"{total} MIG {profile_name} devices on {nodes} nodes but pool {name} has {pool.spec.nodes} nodes x "
                f"{pool.spec.gpus_per_node} GPUs x {per_gpu[(name, profile_name)]} {profile_name} per GPU ({capacity})"
                if profile_name is not None
                else f"{total} GPUs on {nodes} nodes but pool {name} has {pool.spec.nodes} nodes x {per_node} GPUs "
                f"({capacity})"
            )
            yield Finding(
                "gang-unschedulable",
                primary.intent.class_path if primary.intent else "",
                f"the gang needs {what}: the scheduler never starts it and it waits forever; shrink the gang or "
                "use a larger pool",
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
