"""``gang-incomplete`` in-tree: a Volcano Job task whose ``minAvailable`` is below its ``replicas`` under an
all-or-nothing class (Volcano would start part of the task and leave the rest waiting).

Exact where it applies: every task template declares the same class (so whichever template the engine's
gang speaks for, it is that class), both fields are plain integers, and every rule a failed resolution
reports under denies (the engine judges gangs of a resolved class). The Job-level ``minAvailable``
(whose target depends on ``dependsOn`` waves), ``gang-size`` against the pods a kind creates, the other
kinds' gang keys and ``gang-required`` need the kind table's pod counts and the backends' keys: the
webhook's.
"""

from __future__ import annotations

from webhook.policy.compiled import Policy
from webhook.render.intree.cel import resolution_denies
from webhook.render.intree.checks import check
from webhook.render.webhooks import cel_string


def _int(expr: str) -> str:
    """``expr`` is an integer (not a string or a bool): what the engine's ``isinstance(x, int)`` reads."""
    return f"type({expr}) == int"


@check(
    "gang-incomplete",
    "volcano-task-min-available",
    "a Volcano Job task's minAvailable is below its replicas: Volcano would start part of it and leave the rest "
    "waiting; set it to the task's replicas or remove it",
    over="object",
    scope="stored",
)
def task_min_available(policy: Policy, root: str, cls: str) -> str | None:  # type: ignore[override]
    spec = policy.classes[cls]
    if not spec.gang.all_or_nothing:
        return None
    key = cel_string(policy.keys.workload)
    declares = (
        f"has(x.template) && has(x.template.metadata) && has(x.template.metadata.labels) &&\n"
        f"    {key} in x.template.metadata.labels && x.template.metadata.labels[{key}] == {cel_string(cls)}"
    )
    return (
        f"(request.resource.group == 'batch.volcano.sh' && request.resource.resource == 'jobs' &&\n"
        f"  has({root}.spec) && has({root}.spec.tasks) && size({root}.spec.tasks) > 0 &&\n"
        f"  {root}.spec.tasks.all(x, {declares}) &&\n"
        f"  ({resolution_denies(policy, cel_string(cls))}) &&\n"
        f"  {root}.spec.tasks.exists(x, has(x.minAvailable) && has(x.replicas) &&\n"
        f"    {_int('x.minAvailable')} && {_int('x.replicas')} && x.minAvailable >= 0 && x.minAvailable < x.replicas))"
    )
