"""``scheduling-not-allowed`` in-tree: a priority class the template's class does not allow, a
``system-*-critical`` priority on a GPU pod, and a scheduler no class or kind of the policy names.

The priority test is the engine's own list per class (its ``priorityClassName`` and
``allowedPriorityClasses``; the system-critical classes never). The scheduler test is wider than the
engine's: it admits every scheduler any class, gang backend or kind of the policy sets, Volcano, and
the default scheduler (which the apiserver writes into every pod), so it denies only a scheduler the
policy names nowhere.
"""

from __future__ import annotations

from webhook.engine.model.scheduling import DEFAULT_SCHEDULER
from webhook.engine.rules.scheduling import SYSTEM_CRITICAL, _for_class, _gang_scheduler
from webhook.policy.compiled import Policy
from webhook.render.intree.cel import cel_list, class_of
from webhook.render.intree.checks import check
from webhook.render.intree.intent import declares
from webhook.render.webhooks import cel_string


def _priority(t: str) -> str:
    return f"(has({t}.spec.priorityClassName) && {t}.spec.priorityClassName != '')"


@check(
    "scheduling-not-allowed",
    "priority-class",
    "priorityClassName is not one the workload class allows (or is system-*-critical on a GPU pod); remove it "
    "to get the class's own",
    exact=True,
)
def priority(policy: Policy, t: str) -> str:
    allowed = (
        "{"
        + ", ".join(
            f"{cel_string(n)}: {cel_list(_for_class(policy, n, c).priorities)}"
            for n, c in sorted(policy.classes.items())
        )
        + "}"
    )
    cls = class_of(policy, t)
    critical = cel_list(sorted(SYSTEM_CRITICAL))
    return (
        f"(has({t}.spec) && {_priority(t)} && (\n"
        f"  {t}.spec.priorityClassName in {critical} ||\n"
        f"  ({declares(policy, t)} && {cls} in {allowed} && !({t}.spec.priorityClassName in {allowed}[{cls}]))))"
    )


def _schedulers(policy: Policy) -> list[str]:
    names = {DEFAULT_SCHEDULER, "", "volcano", "kai-scheduler"}
    for name, cls in policy.classes.items():
        names.update(_for_class(policy, name, cls).schedulers)
        names.update(s for s in (cls.scheduler_name, _gang_scheduler(cls)) if s)
    for kind in policy.kinds.values():
        names.update(kind.spec.schedulers)
    return sorted(names)


@check(
    "scheduling-not-allowed",
    "scheduler-name",
    "schedulerName names a scheduler the policy allows for no class (another scheduler ignores the platform's "
    "queues, gangs and placement); remove it",
    over="classed",
    exact=True,
)
def scheduler(policy: Policy, t: str) -> str:
    return (
        f"(has({t}.spec) && has({t}.spec.schedulerName) &&\n"
        f"  !({t}.spec.schedulerName in {cel_list(_schedulers(policy))}))"
    )
