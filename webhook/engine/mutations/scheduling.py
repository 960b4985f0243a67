"""SPEC §3 row 'class scheduling': priorityClassName and schedulerName when the user set none.

``default-scheduler`` counts as unset: the apiserver defaults it before admission, so a webhook never
sees an empty schedulerName on a Pod. When a priorityClassName is added, a defaulted ``spec.priority``
is removed: the Priority admission plugin runs again after webhook mutation and would otherwise reject
the pod because the integer no longer matches the class.
"""

from __future__ import annotations

from webhook.engine.context import Context, TemplateState
from webhook.engine.patch import PatchBuilder

DEFAULT_SCHEDULER = "default-scheduler"


def unset_scheduler(value: object) -> bool:
    return value in (None, "", DEFAULT_SCHEDULER)


def set_scheduler(patch: PatchBuilder, spec_path: tuple, name: str) -> None:
    path = (*spec_path, "schedulerName")
    if unset_scheduler(patch.get(path)):
        patch.set(path, name, overwrite=True)


def apply(ctx: Context, state: TemplateState, patch: PatchBuilder) -> None:
    cls = state.cls
    if cls is None:
        return
    spec = state.tpl.spec_path
    if cls.priority_class_name and not patch.get((*spec, "priorityClassName")):
        patch.set((*spec, "priorityClassName"), cls.priority_class_name, overwrite=True)
        patch.remove((*spec, "priority"))
    if cls.scheduler_name:
        set_scheduler(patch, spec, cls.scheduler_name)
    res = state.resolution
    if res is not None and res.pool.spec.sharing is not None and "volcano.sh/vgpu-number" in res.resources:
        set_scheduler(patch, spec, "volcano")  # the vGPU device plugin is only honoured by Volcano
