"""Class scheduling: priorityClassName and schedulerName when the user set none.

``default-scheduler`` counts as unset: the apiserver defaults it before admission, so a webhook never
sees an empty schedulerName on a Pod. When a priorityClassName is added, the defaulted ``spec.priority``
and ``spec.preemptionPolicy`` are removed: the Priority admission plugin, which wrote them for a pod
without a class before the webhooks ran, runs again after webhook mutation (reinvocation) and refuses a
pod whose spec carries a value other than its class computes. A class with ``preemptionPolicy: Never``
(the shipped preemptible batch class) was refused on every real apiserver for the second one.
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
        removed = [f for f in ("priority", "preemptionPolicy") if patch.remove((*spec, f))]
        if done is not None:
            done.append(f"priorityClassName {cls.priority_class_name}")
            if removed:
                done.append(f"defaulted spec.{' and spec.'.join(removed)} removed")
    if cls.scheduler_name and set_scheduler(patch, spec, cls.scheduler_name) and done is not None:
        done.append(f"schedulerName {cls.scheduler_name}")
    res = state.resolution
    own = res.scheduler if res is not None else None  # only the stack's scheduler accounts for its slices
    if own and set_scheduler(patch, spec, own) and done is not None:
        done.append(f"schedulerName {own} (the sharing stack's own scheduler)")
    if done:
        ctx.explain(f"scheduling: {', '.join(done)}")
