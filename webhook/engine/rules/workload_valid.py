"""``workload-invalid``: the keys a gang backend owns, checked as that backend checks them.

A Volcano Job its own admission webhook (or CRD schema) refuses, or a pod Kueue's webhook rejects,
would fail at ``kubectl apply`` at best; at worst (Volcano's webhook off, Kueue's not watching the
namespace) it is stored and never runs. Where the backend's source gives the message, the message is
the backend's own, followed by what to change. Only objects in scope (GPU devices or intent) reach
the rules at all, so a typo in another product's key never denies a CPU workload.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from webhook.engine.model.context import Context, Finding
from webhook.engine.model.gang import (
    KUEUE_GROUP,
    KUEUE_MIN_PARALLELISM,
    KUEUE_PREFERRED,
    KUEUE_QUEUE,
    KUEUE_REQUIRED,
    KUEUE_TAS,
    KUEUE_TOTAL,
    job_paths,
)
from webhook.engine.model.tasks import depends_on, task_name, tasks_of
from webhook.engine.model.workload import dotted
from webhook.engine.rules.registry import rule

RULE = "workload-invalid"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")

KUEUE_SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
KUEUE_UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
_TAS_LIST = ", ".join(f'"{k}"' for k in KUEUE_TAS)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def label_key(value: str) -> bool:
    """A Kubernetes label key: ``[prefix/]name``, prefix a DNS subdomain (≤ 253), name ≤ 63."""
    prefix, _, name = value.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


def _object_name(value: str) -> bool:
    """A name that is also a label value: a DNS-1123 subdomain of at most 63 characters."""
    return 0 < len(value) <= 63 and bool(_DNS_SUBDOMAIN.match(value))


@rule(
    RULE,
)
def workload_invalid(ctx: Context) -> Iterable[Finding]:
    cname = _class_name(ctx)
    obj = ctx.mutated or ctx.obj  # judged as it will be stored: our own mutation must not break it
    if ctx.workload.tasks is not None:
        yield from _volcano(obj, ctx.workload.tasks, cname)
    yield from _kueue(ctx, obj, cname)


def _class_name(ctx: Context) -> str | None:
    primary = ctx.primary
    if primary is not None:
        return primary.class_name
    for state in ctx.states:
        if state.class_name is not None:
            return state.class_name
    meta = _map(ctx.obj.get("metadata"))
    value = _map(meta.get("labels")).get(ctx.policy.keys.workload)
    return value if isinstance(value, str) else None


# --- Volcano Job ------------------------------------------------------------------------------------


def _volcano(obj: dict[str, Any], at: tuple[str | int, ...], cname: str | None) -> Iterator[Finding]:
    spec = _map(obj.get("spec"))
    tasks = tasks_of(obj, at)
    job = str(_map(obj.get("metadata")).get("name") or "")

    def found(path: tuple, message: str) -> Finding:
        return Finding(RULE, dotted(path), message, cname)

    if not tasks:
        yield found(
            ("spec", "tasks"),
            "No task specified in job spec: Volcano rejects the job; add at least one task "
            "(name, replicas, template) under spec.tasks",
        )
        return
    yield from _network_topology(spec.get("networkTopology"), ("spec", "networkTopology"), found)
    names = [task_name(t, i) for i, t in enumerate(tasks)]
    seen: set[str] = set()
    for index, task in enumerate(tasks):
        name, at = names[index], ("spec", "tasks", index)
        own = task.get("name")
        if isinstance(own, str) and own and (len(own) > 63 or not _DNS_LABEL.match(own)):
            yield found(
                (*at, "name"),
                f"task name {own!r} is not a DNS-1123 label (lower case, digits, '-', at most 63 "
                "characters); Volcano names the task's pods after it: rename it",
            )
        if name in seen:
            yield found(
                (*at, "name"),
                f"duplicated task name {name}; Volcano rejects the job: give every task its own name",
            )
        seen.add(name)
        replicas = task.get("replicas")
        if replicas is None:
            yield found(
                (*at, "replicas"),
                f"task {name!r} has no replicas: Volcano creates no pods for it; set replicas",
            )
        elif _int(replicas) is not None and replicas < 0:
            yield found(
                (*at, "replicas"),
                f"'replicas' must be >= 0 in task: {name}; set the number of pods the task runs",
            )
        task_min = _int(task.get("minAvailable"))
        if task_min is not None and task_min < 0:
            yield found((*at, "minAvailable"), f"'minAvailable' must be >= 0 in task: {name}; remove it or set it")
        yield from _partition(task, name, job, at, found)
    job_min = _int(spec.get("minAvailable"))
    if job_min is not None and job_min < 0:
        yield found(("spec", "minAvailable"), "job 'minAvailable' must be >= 0; remove it or set it")
    yield from _dependencies(tasks, names, found)
    yield from _mpi_master(spec, names, found)


def _network_topology(value: Any, at: tuple, found) -> Iterator[Finding]:
    topology = _map(value)
    if "highestTierAllowed" in topology and "highestTierName" in topology:
        yield found(
            at,
            "must not specify 'highestTierAllowed' and 'highestTierName' in networkTopology simultaneously; "
            "keep one of them",
        )


def _partition(task: dict[str, Any], name: str, job: str, at: tuple, found) -> Iterator[Finding]:
    policy = task.get("partitionPolicy")
    if not isinstance(policy, dict):
        return
    where = (*at, "partitionPolicy")
    total, size = _int(policy.get("totalPartitions")), _int(policy.get("partitionSize"))
    if total is None or total <= 0:
        yield found(
            (*where, "totalPartitions"), f"'TotalPartitions' must be greater than 0 in task: {name}, job: {job}"
        )
    if size is None or size <= 0:
        yield found((*where, "partitionSize"), f"'PartitionSize' must be greater than 0 in task: {name}, job: {job}")
    replicas = _int(task.get("replicas"))
    if total and size and total > 0 and size > 0:
        if replicas != total * size:
            yield found(
                (*at, "replicas"),
                f"'Replicas' are not equal to TotalPartitions*PartitionSize in task: {name}, job: {job}; "
                f"set replicas: {total * size} or change the partitions",
            )
        min_partitions = _int(policy.get("minPartitions"))
        task_min = _int(task.get("minAvailable"))
        if min_partitions and min_partitions > 0 and task_min is not None and task_min != min_partitions * size:
            yield found(
                (*at, "minAvailable"),
                f"'MinAvailable' is not equal to MinPartitions*PartitionSize in task: {name}, job: {job}; "
                f"set minAvailable: {min_partitions * size} or remove it",
            )
    yield from _network_topology(policy.get("networkTopology"), (*where, "networkTopology"), found)


def _dependencies(tasks: list[dict[str, Any]], names: list[str], found) -> Iterator[Finding]:
    known = set(names)
    graph: dict[str, list[str]] = {}
    for index, task in enumerate(tasks):
        deps = depends_on(task)
        graph[names[index]] = deps
        for dep in deps:
            if dep not in known:
                yield found(
                    ("spec", "tasks", index, "dependsOn", "name"),
                    f"task {names[index]!r} depends on {dep!r}, which is not a task of this job: Volcano "
                    f"never creates its pods; use one of {', '.join(names)}",
                )
    if _cyclic(graph):
        index = next(i for i, t in enumerate(tasks) if depends_on(t))
        yield found(
            ("spec", "tasks", index, "dependsOn"),
            "job has dependencies between tasks, but doesn't form a directed acyclic graph(DAG); "
            "remove the dependsOn that closes the cycle",
        )


def _cyclic(graph: dict[str, list[str]]) -> bool:
    state: dict[str, int] = {}  # 1 visiting, 2 done
    for start in graph:
        if state.get(start):
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        state[start] = 1
        while stack:
            node, i = stack.pop()
            deps = graph.get(node, [])
            if i < len(deps):
                stack.append((node, i + 1))
                nxt = deps[i]
                if state.get(nxt) == 1:
                    return True
                if nxt in graph and not state.get(nxt):
                    state[nxt] = 1
                    stack.append((nxt, 0))
            else:
                state[node] = 2
    return False


def _mpi_master(spec: dict[str, Any], names: list[str], found) -> Iterator[Finding]:
    plugins = _map(spec.get("plugins"))
    if "mpi" not in plugins:
        return
    master = "master"
    args = plugins.get("mpi")
    for arg in args if isinstance(args, list) else []:
        if isinstance(arg, str) and arg.startswith("--master="):
            master = arg.split("=", 1)[1]
    if master not in names:
        yield found(
            ("spec", "plugins", "mpi"),
            f"The specified mpi master task was not found (no task named {master!r}); name the launcher task "
            f"{master!r} or pass --master=<task>",
        )


# --- Kueue ------------------------------------------------------------------------------------------


def _kueue(ctx: Context, obj: dict[str, Any], cname: str | None) -> Iterator[Finding]:
    meta = _map(obj.get("metadata"))
    yield from _queue_name(_map(meta.get("labels")), ("metadata",), cname)
    if ctx.workload.batch_job is not None:
        yield from _min_parallelism(ctx, obj, cname)
    for state in ctx.states:
        tpl = state.view  # the template in the object as it will be stored
        labels, annotations = _map(tpl.metadata.get("labels")), _map(tpl.metadata.get("annotations"))
        at = (*tpl.path, "metadata")
        if tpl.path:
            yield from _queue_name(labels, at, cname)
        yield from _pod_group(labels, annotations, at, cname)
        yield from _tas(annotations, at, tpl.replicas, cname)


def _queue_name(labels: dict[str, Any], at: tuple, cname: str | None) -> Iterator[Finding]:
    queue = labels.get(KUEUE_QUEUE)
    if isinstance(queue, str) and not _object_name(queue):
        yield Finding(
            RULE,
            dotted((*at, "labels", KUEUE_QUEUE)),
            f"{KUEUE_QUEUE} {queue!r} is not a LocalQueue name (lower case letters, digits, '-' and '.', "
            "at most 63 characters): Kueue never admits the workload; use the queue's name",
            cname,
        )


def _pod_group(labels: dict[str, Any], annotations: dict[str, Any], at: tuple, cname: str | None) -> Iterator[Finding]:
    group, total = labels.get(KUEUE_GROUP), annotations.get(KUEUE_TOTAL)
    if group is None and total is None:
        return
    if (group is None) != (total is None):
        missing = ("annotations", KUEUE_TOTAL) if total is None else ("labels", KUEUE_GROUP)
        yield Finding(
            RULE,
            dotted((*at, *missing)),
            f"both the '{KUEUE_TOTAL}' annotation and the '{KUEUE_GROUP}' label should be set; "
            f"add {missing[1]} (or remove the other)",
            cname,
        )
    if isinstance(group, str) and not _object_name(group):
        yield Finding(
            RULE,
            dotted((*at, "labels", KUEUE_GROUP)),
            f"{KUEUE_GROUP} {group!r} is not a valid name (lower case letters, digits, '-' and '.', at most "
            "63 characters): Kueue rejects the pod; rename the group",
            cname,
        )
    if total is not None:
        text = str(total)
        if not (text.isascii() and text.isdigit() and len(text) <= 9 and int(text) >= 1):
            yield Finding(
                RULE,
                dotted((*at, "annotations", KUEUE_TOTAL)),
                f"incorrect annotation value '{KUEUE_TOTAL}={text}': group total count should be greater than "
                "zero; set it to the number of pods in the group",
                cname,
            )


def _tas(annotations: dict[str, Any], at: tuple, pods: int, cname: str | None) -> Iterator[Finding]:
    def found(key: str, message: str) -> Finding:
        return Finding(RULE, dotted((*at, "annotations", key)), message, cname)

    present = [k for k in KUEUE_TAS if k in annotations]
    if len(present) > 1:
        yield found(present[1], f"must not contain more than one topology annotation: [{_TAS_LIST}]; keep one")
    for key in (KUEUE_REQUIRED, KUEUE_PREFERRED, KUEUE_SLICE_REQUIRED):
        level = annotations.get(key)
        if level is not None and not (isinstance(level, str) and label_key(level)):
            yield found(
                key,
                f"{key} {level!r} is not a node label key (a topology level such as "
                "topology.kubernetes.io/zone): Kueue rejects it; use a level of the cluster's Topology",
            )
    unconstrained = annotations.get(KUEUE_UNCONSTRAINED)
    if unconstrained is not None and str(unconstrained).lower() not in ("true", "false"):
        yield found(KUEUE_UNCONSTRAINED, 'must be a boolean value ("true" or "false")')
    if KUEUE_SLICE_REQUIRED in annotations:
        size = annotations.get(KUEUE_SLICE_SIZE)
        if size is None:
            yield found(KUEUE_SLICE_SIZE, f"must be set when '{KUEUE_SLICE_REQUIRED}' is specified; add the slice size")
        else:
            text = str(size)
            count = int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None
            if count is None or count < 1:
                yield found(KUEUE_SLICE_SIZE, f"{KUEUE_SLICE_SIZE} must be an integer >= 1, got {text!r}")
            elif count > pods:
                yield found(KUEUE_SLICE_SIZE, f"must not be greater than pod set count {pods}; lower the slice size")


def _min_parallelism(ctx: Context, obj: dict[str, Any], cname: str | None) -> Iterator[Finding]:
    meta_path, spec_path = job_paths(ctx.workload)
    meta: Any = obj
    for part in meta_path:
        meta = _map(meta).get(part)
    value = _map(_map(meta).get("annotations")).get(KUEUE_MIN_PARALLELISM)
    if value is None:
        return
    spec: Any = obj
    for part in spec_path:
        spec = _map(spec).get(part)
    parallelism = _int(_map(spec).get("parallelism"))
    parallelism = 1 if parallelism is None else parallelism
    text = str(value)
    count = int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None
    if count is None or count < 1 or count >= parallelism:
        yield Finding(
            RULE,
            dotted((*meta_path, "annotations", KUEUE_MIN_PARALLELISM)),
            f"{KUEUE_MIN_PARALLELISM} {text!r} must be an integer from 1 to {parallelism - 1} (below "
            f"parallelism {parallelism}): Kueue rejects the Job; remove the annotation or fix it",
            cname,
        )
