"""Gang scheduling: the gang (:mod:`webhook.engine.model.gang`) spelled in the keys the kind's
integration with the class's backend reads (``CompiledKind.backends``). Values the user or another
webhook already set are kept; a *wrong* value is a validation finding, not an overwrite.
"""

from __future__ import annotations

from webhook.engine.model.context import Context
from webhook.engine.model.gang import applies, backend_keys, targets, value_for
from webhook.engine.model.scheduling import set_scheduler
from webhook.engine.patch import PatchBuilder
from webhook.policy.kinds import GangValue
from webhook.policy.model import GangBackend


def apply(ctx: Context, patch: PatchBuilder) -> None:
    gang = ctx.gang
    if gang is None or gang.backend is GangBackend.NONE:
        return
    keys = backend_keys(ctx)
    if not keys:
        return  # no integration: gang-required says which backend has one
    before = len(patch.ops)
    for key in keys:
        if not key.write or not applies(ctx, key):
            continue
        for path, replicas, _ in targets(ctx, key):
            value = value_for(ctx, key, replicas)
            if value is None or (key.value is GangValue.SIZE and not key.as_string and value == 0):
                continue
            if key.value is GangValue.SCHEDULER and path[-1] == "schedulerName":
                set_scheduler(patch, path[:-1], str(value))
            else:
                patch.set(path, value)
    if ctx.trace is not None and len(patch.ops) > before:
        changed = [op["path"] for op in patch.ops[before:]]
        ctx.explain(f"gang: {gang.backend.value} set {', '.join(changed)}")
