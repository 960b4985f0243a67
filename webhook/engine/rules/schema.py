"""Rules on the object's shape where the apiserver would silently drop or reject what the user meant."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from webhook.engine.model.context import Context, Finding
from webhook.engine.model.tasks import KNOWN_MIXUPS, unknown_fields
from webhook.engine.model.workload import dotted
from webhook.engine.rules.registry import resolution_findings, rule


@rule(
    "unknown-field",
    needs=("validated-fields",),
)
def unknown_field(ctx: Context) -> Iterable[Finding]:
    if not ctx.workload.spec.validate_fields:
        return
    cname = ctx.primary.class_name if ctx.primary is not None else None
    for path, key, known in unknown_fields(ctx.obj):
        hint = KNOWN_MIXUPS.get(key)
        if hint is None:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = close[0] if close else None
        suggestion = f"; did you mean {hint}?" if hint else f"; valid here: {', '.join(known)}"
        extra = (
            " (minMember is a PodGroup field; a Volcano Job says minAvailable)" if key == "minMember" else ""
        )
        yield Finding(
            "unknown-field",
            dotted(path),
            f"{key!r} is not a field of a Volcano Job{extra}{suggestion}",
            cname,
        )


@rule(
    "malformed-object",
    needs=("findings",),
)
def malformed_object(ctx: Context) -> Iterable[Finding]:
    return resolution_findings(ctx, "malformed-object")
