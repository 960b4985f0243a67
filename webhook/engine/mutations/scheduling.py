"""Class scheduling: priorityClassName and schedulerName when the user set none.

``default-scheduler`` counts as unset: the apiserver defaults it before admission, so a webhook never
sees an empty schedulerName on a Pod. When a priorityClassName is added, a defaulted ``spec.priority``
is removed: the Priority admission plugin runs again after webhook mutation and would otherwise reject
the pod because the integer no longer matches the class.
"""

from __future__ import annotations

from webhook.engine.model.context import Context, TemplateState
from webhook.engine.model.scheduling import set_scheduler
from webhook.engine.patch import PatchBuilder


def apply(ctx: Context, state: TemplateState, patch: PatchBuilder) -> None:
    cls = state.cls
    if cls is None:
        return
    spec = state.tpl.spec_path
    done: list[str] | None = [] if ctx.trace is not None else None  # what --explain reports
    if cls.priority_class_name and not patch.get((*spec, "priorityClassName")):
        patch.set((*spec, "priorityClassName"), cls.priority_class_name, overwrite=True)
        removed = patch.remove((*spec, "priority"))
        if done is not None:
            done.append(f"priorityClassName {cls.priority_class_name}")
            if removed:
                done.append("defaulted spec.priority removed")
    if cls.scheduler_name and set_scheduler(patch, spec, cls.scheduler_name) and done is not None:
        done.append(f"schedulerName {cls.scheduler_name}")
    res = state.resolution
    own = res.scheduler if res is not None else None  # only the stack's scheduler accounts for its slices
    if own and set_scheduler(patch, spec, own) and done is not None:
        done.append(f"schedulerName {own} (the sharing stack's own scheduler)")
    if done:
        ctx.explain(f"scheduling: {', '.join(done)}")
