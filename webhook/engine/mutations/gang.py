"""SPEC §3 rows 'gang': the all-or-nothing group for Volcano, Kueue or coscheduling.

The gang is derived from the workload (Volcano Job: Σ task replicas; batch/v1 Job: parallelism; bare
pods: the ``gang``/``gang-size`` annotations), then spelled in the backend's own keys. Values the user
or another webhook already set are kept; a *wrong* value is a validation finding, not an overwrite.
"""

from __future__ import annotations

from webhook.engine.context import Context, Gang
from webhook.engine.mutations.scheduling import set_scheduler
from webhook.engine.patch import PatchBuilder
from webhook.engine.volcano_fields import first_wave, task_replicas, tasks_of
from webhook.engine.workload import Kind
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


def job_paths(kind: Kind) -> tuple[tuple, tuple]:
    """(metadata path, spec path) of the batch Job inside the object."""
    if kind is Kind.CRONJOB:
        return ("spec", "jobTemplate", "metadata"), ("spec", "jobTemplate", "spec")
    return ("metadata",), ("spec",)


def pod_count(ctx: Context) -> int:
    if ctx.kind is Kind.VOLCANO_JOB:  # a negative count creates no pods (and is workload-invalid)
        return sum(task_replicas(t) for t in tasks_of(ctx.obj))
    if ctx.kind in (Kind.JOB, Kind.CRONJOB):
        _, job_spec = job_paths(ctx.kind)
        node = ctx.obj
        for part in job_spec:
            node = node.get(part) if isinstance(node, dict) else None
        job = node if isinstance(node, dict) else {}
        parallelism = job.get("parallelism", 1)
        completions = job.get("completions")
        if not isinstance(parallelism, int) or isinstance(parallelism, bool):
            parallelism = 1
        if isinstance(completions, int) and not isinstance(completions, bool) and completions < parallelism:
            return completions
        return parallelism
    if ctx.kind is Kind.POD:
        primary = ctx.primary
        if primary is not None and primary.intent is not None and primary.intent.gang_size:
            return primary.intent.gang_size
        total = kueue_total(ctx.obj)  # the group the user spelled in Kueue's own keys
        return total if total is not None else 1
    return max((s.tpl.replicas for s in ctx.states), default=1)


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
    name: str | None = (
        ctx.name if ctx.kind is not Kind.POD else (primary.intent.gang if primary.intent else None)
    )
    meta = ctx.obj.get("metadata") if isinstance(ctx.obj.get("metadata"), dict) else {}
    if ctx.kind is not Kind.POD and not meta.get("name"):
        name = None  # generateName: the final name is not known at admission
    if ctx.kind is Kind.POD and name is None and backend is GangBackend.KUEUE:
        group = _pod_meta(ctx.obj, "labels").get(KUEUE_GROUP)  # the user named the group in Kueue's key
        name = group if isinstance(group, str) and group else None
    start = first_wave(tasks_of(ctx.obj)) if ctx.kind is Kind.VOLCANO_JOB else None
    selector: dict[str, str] | None = None
    if name:
        if ctx.kind is Kind.VOLCANO_JOB:
            selector = {VOLCANO_JOB_NAME: name}
        elif ctx.kind is Kind.JOB:
            selector = {JOB_NAME: name}
        elif ctx.kind is Kind.POD:
            selector = {f"{ctx.policy.settings.prefix}/gang": name}
    return Gang(backend=backend, name=name, size=size, selector=selector, start=start)


def scheduler_for(ctx: Context) -> str:
    primary = ctx.primary
    assert primary is not None and primary.cls is not None
    return primary.cls.gang.scheduler_name or "volcano"


def kueue_queue(ctx: Context) -> str | None:
    primary = ctx.primary
    if ctx.entitlement is not None and ctx.entitlement.kueue_queue:
        return ctx.entitlement.kueue_queue
    return primary.cls.kueue_queue if primary is not None and primary.cls is not None else None


def apply(ctx: Context, patch: PatchBuilder) -> None:
    gang = ctx.gang
    if gang is None or gang.backend is GangBackend.NONE:
        return
    kind = ctx.kind
    before = len(patch.ops)
    _apply(ctx, gang, kind, patch)
    if ctx.trace is not None and len(patch.ops) > before:
        changed = [op["path"] for op in patch.ops[before:]]
        ctx.explain(f"gang: {gang.backend.value} set {', '.join(changed)}")


def _apply(ctx: Context, gang: Gang, kind: Kind, patch: PatchBuilder) -> None:
    if gang.backend is GangBackend.VOLCANO:
        scheduler = scheduler_for(ctx)
        if kind is Kind.VOLCANO_JOB:
            set_scheduler(patch, ("spec",), scheduler)
            if patch.get(("spec", "minAvailable")) is None and gang.min_member > 0:
                # with dependsOn, only the tasks created first can form the gang (see Gang.start)
                patch.set(("spec", "minAvailable"), gang.min_member)
            return
        if gang.size <= 1:
            return
        if kind in (Kind.JOB, Kind.CRONJOB):
            meta, _ = job_paths(kind)
            for state in ctx.states:
                set_scheduler(patch, state.tpl.spec_path, scheduler)
            patch.set((*meta, "annotations", VOLCANO_MIN_MEMBER), str(gang.size))
        elif kind is Kind.POD and gang.name:
            patch.set(("metadata", "annotations", VOLCANO_GROUP_NAME), gang.name)
            set_scheduler(patch, ("spec",), scheduler)
        return
    if gang.backend is GangBackend.KUEUE:
        queue = kueue_queue(ctx)
        if queue is None:
            return
        if kind is Kind.POD:
            patch.set(("metadata", "labels", KUEUE_QUEUE), queue)
            if gang.name and gang.size > 1:
                patch.set(("metadata", "labels", KUEUE_GROUP), gang.name)
                patch.set(("metadata", "annotations", KUEUE_TOTAL), str(gang.size))
        elif kind in (Kind.JOB, Kind.CRONJOB, Kind.VOLCANO_JOB):
            meta, _ = job_paths(kind) if kind is not Kind.VOLCANO_JOB else (("metadata",), ())
            patch.set((*meta, "labels", KUEUE_QUEUE), queue)
        return
    if gang.backend is GangBackend.COSCHEDULING and gang.name and gang.size > 1:
        primary = ctx.primary
        scheduler = (
            primary.cls.gang.scheduler_name if primary is not None and primary.cls is not None else None
        )
        for state in ctx.states:
            if state.resolution is None:
                continue
            patch.set((*state.tpl.meta_path, "labels", COSCHEDULING_GROUP), gang.name)
            if scheduler:
                set_scheduler(patch, state.tpl.spec_path, scheduler)
