"""The GPU count a class object already holds is part of its intent.

A ``training`` pod that writes ``nvidia.com/gpu: 16`` in its GPU container and no ``gpu-admission.io/gpus``
asked for 16 GPUs. The intent's default of one GPU would rewrite that to 1: a different workload than
the one written, admitted without a word (and the class's ``maxGPUs`` never judged). So the count the
GPU container writes is read as the ``gpus`` intent, before the class resolves: the translation keeps it,
and the count, pool and class rules judge it. A ``gpus`` annotation that says another number is a
conflict only the user can settle, and so are several whole GPUs on a class whose pods get one MIG
device or slice: an ``intent-invalid`` finding that names both values and the fix. A conflicting
template does not resolve, so ``/mutate`` leaves what the user wrote and ``/validate`` sees the same
conflict on the stored pod (rewriting it would hide the conflict from every later judge).

Only the whole-GPU name counts here (``nvidia.com/gpu``): it is what a user writes for "N GPUs", and on
every stack that reuses the name (HAMi, time-slicing, MIG single strategy) the engine itself writes the
intent's count there, so a stored object reads back the count it was translated from.
"""

from __future__ import annotations

from webhook.engine.model.devices import PodResources, plain_count
from webhook.engine.model.intent import MAX_INTEGER_DIGITS, Intent
from webhook.engine.model.workload import Template
from webhook.policy.compiled import Policy
from webhook.policy.model import Entitlement, Isolation
from webhook.policy.stacks import WHOLE_GPU


def _target(tpl: Template, resources: PodResources, container: str | None) -> tuple[int, dict, str] | None:
    """(index, limits-or-requests map, section) of the GPU container's whole-GPU count, if it writes one."""
    for c in resources.containers:
        if c.group != "containers" or (container is not None and c.name != container):
            continue
        for section, values in (("limits", c.limits), ("requests", c.requests)):
            if WHOLE_GPU in values:
                return c.index, values, section
        return None  # the GPU container is the named one, else the first: it writes no count
    return None


def with_written_count(
    policy: Policy, tpl: Template, resources: PodResources, intent: Intent, entitlement: Entitlement | None
) -> Intent:
    """``intent`` with the GPU container's written ``nvidia.com/gpu`` count as its ``gpus``, or with the
    conflict when the count cannot be the intent: a ``gpus`` annotation that says another number, or
    several whole GPUs on a class whose pods get one MIG device or slice. Raw requests adopted into a
    class keep their resources as written already; an unreadable count is ``extended-resource``'s."""
    if intent.adopted_from is not None:
        return intent
    cls = policy.classes.get(intent.class_name)
    found = _target(tpl, resources, intent.container)
    if found is None or cls is None:
        return intent
    index, values, section = found
    raw = values[WHOLE_GPU]
    if not plain_count(raw) or len(raw) > MAX_INTEGER_DIGITS or int(raw) < 1:
        return intent
    count = int(raw)
    path = tpl.dotted("spec", "containers", index, "resources", section, WHOLE_GPU)
    key = policy.keys.gpus
    if intent.gpus_set:
        if intent.gpus == count:
            return intent
        annotation = intent.path_of(key, intent.class_path)
        return intent._replace(
            conflict=(
                path,
                f"{WHOLE_GPU}: {raw} here and {key}: {intent.gpus} ({annotation}) ask for different GPU "
                f"counts, and the webhook will not pick one: remove {WHOLE_GPU} (the annotation sets it), "
                "or remove the annotation (the count here is then the intent), or make them equal",
            )
        )
    ruled = entitlement.default_isolation.get(intent.class_name) if entitlement is not None else None
    isolation = intent.isolation or ruled or cls.isolation.default
    if isolation is Isolation.EXCLUSIVE:
        return intent._replace(gpus=count, gpus_set=True, paths=(*intent.paths, (key, path)))
    if count == 1:
        return intent  # one device: the class's one MIG device or slice stands for it, as it always has
    exclusive = Isolation.EXCLUSIVE in cls.isolation.permitted
    fix = (
        f"set {policy.keys.isolation}: exclusive for {count} whole GPUs"
        if exclusive
        else f"class {intent.class_name!r} gives no whole GPUs: ask for 1, or use a class that does"
    )
    return intent._replace(
        conflict=(
            path,
            f"{WHOLE_GPU}: {raw} asks for {count} whole GPUs, but class {intent.class_name!r} gives its pods "
            f"isolation {isolation.value} ({'intent' if intent.isolation is not None else 'by default'}), "
            f"one {'MIG device' if isolation is Isolation.MIG else 'shared slice'} per pod; {fix}",
        )
    )
