"""``gang-incomplete`` in-tree: a Volcano Job task whose ``minAvailable`` is below its ``replicas`` under an
all-or-nothing class (Volcano would start part of the task and leave the rest waiting).

Exact where it applies: every task template declares the same class (so whichever template the engine's
gang speaks for, it is that class), both fields are plain integers, and every rule a failed resolution
reports under denies (the engine judges gangs of a resolved class). The Job-level ``minAvailable``
(whose target depends on ``dependsOn`` waves), ``gang-size`` against the pods a kind creates and the other
kinds' gang keys need the kind table's pod counts and the backends' keys: the webhook's.

``gang-required`` in-tree: a kind the webhook mutates whose one pod template sits at a literal path and
counts its pods from literal integer fields (a batch Job: ``parallelism`` capped by ``completions``),
stored with more than one pod under a gang-required class, and either without a way to gang at all (no
backend, or a backend the kind table gives no integration for that kind) or without a key the class's
backend reads that the engine would find missing whatever else the object says (a key the webhook writes
with a size, a literal, a gang name it needs, or Kueue's queue). The pod count is the engine's own formula
(first integer field, else the default, capped, never below 0) rendered into CEL; the engine's checks
come key by key and every one that stops, stops with a denial, so one missing key is a denial. Scheduler
names and priority classes (the engine also admits them absent) are not read; operator kinds with
wildcard templates, bare Pods (gang-size intent) and controllers (judged as their pods will be) need the
webhook. On UPDATE the check is waived when the old object declared the class already (the engine
reports only a changed finding, whose message the CEL does not rebuild).
"""

from __future__ import annotations

import re

from webhook.policy.compiled import Policy
from webhook.policy.kinds import CompiledKey, CompiledKind, GangValue, Path, Wild
from webhook.policy.model import GangBackend
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


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED = frozenset(
    {
        "as", "break", "const", "continue", "else", "false", "for", "function", "if", "import", "in", "let",
        "loop", "namespace", "null", "package", "return", "true", "var", "void", "while",
    }
)


def _walk(root: str, path: Path) -> tuple[str, list[str]] | None:
    """(CEL of the value at ``path`` under ``root``, the guards that make reading it safe), or None when
    the path has a wildcard or a part CEL cannot name: such a key is not rendered (never stricter)."""
    expr, guards = root, []
    for part in path:
        if isinstance(part, Wild) or not isinstance(part, str):
            return None
        if _IDENT.match(part) and part not in _RESERVED:
            guards.append(f"has({expr}.{part})")
            expr = f"{expr}.{part}"
        else:
            guards.append(f"{cel_string(part)} in {expr}")
            expr = f"{expr}[{cel_string(part)}]"
    return expr, guards


def _present(root: str, path: Path) -> str | None:
    walked = _walk(root, path)
    if walked is None:
        return None
    return " && ".join(walked[1]) or "true"


def _pod_count(kind: CompiledKind, root: str, body: str) -> str | None:
    """``body`` with ``n`` bound to the engine's pod count of the kind's one template
    (``CompiledCount.value``: the first integer field, else the default, capped by ``atMost``), or None
    when the template has no count or several, subtracts (``minusWhen``) or reads a path CEL cannot name.
    The count's floor at 0 is left out: ``body`` only asks about counts above 1."""
    (tpl,) = kind.templates
    if len(tpl.replicas) != 1 or tpl.replicas[0].minus:
        return None
    count = tpl.replicas[0]
    value = str(count.default)
    for field in reversed(count.fields):
        walked = _walk(root, field)
        if walked is None:
            return None
        expr, guards = walked
        value = f"{' && '.join(guards)} && {_int(expr)} ? {expr} : {value}"
    if count.at_most is None:
        return f"[{value}].exists(n, {body})"
    walked = _walk(root, count.at_most)
    if walked is None:
        return None
    cap, guards = walked
    capped = f"{' && '.join(guards)} && {_int(cap)} && {cap} < v ? {cap} : v"
    return f"[{value}].exists(v, [{capped}].exists(n,\n      {body}))"


def _denying(key: CompiledKey, backend: GangBackend) -> bool:
    """A key whose absence the engine always reports (``_gang_missing``: a written key with a known value).

    In the engine's order: a scheduler key is never reported absent (the pods inherit one, or our
    mutation sets it); a queue key only under Kueue (Volcano and KAI have a default queue); then a literal,
    the gang size, or the gang name where the key needs one (without a name the engine reports that
    instead). A priority class may be unset in the class, so its key is not read."""
    if not key.write or key.value is GangValue.SCHEDULER:
        return False
    if key.value is GangValue.QUEUE:
        return backend is GangBackend.KUEUE
    if key.literal is not None or key.value is GangValue.SIZE:
        return True
    return key.value is GangValue.NAME and key.needs_name


def _gang_kinds(policy: Policy) -> list[CompiledKind]:
    """Kinds the webhook mutates (judged as stored) whose one gang template sits at a literal path."""
    out = []
    for kind in policy.kinds.values():
        rules = kind.spec.gang
        if not kind.mutate or kind.spec.scope != "Namespaced" or rules.size != "replicas" or rules.carrier != "kind":
            continue
        if len(kind.templates) != 1:
            continue
        tpl = kind.templates[0]  # a template built from a resources field (TrainJob) has the object's metadata
        if not tpl.gang or tpl.resources is not None or _walk("x", tpl.path) is None:
            continue
        out.append(kind)
    return out


def _kind_test(policy: Policy, kind: CompiledKind, root: str, cls: str) -> str | None:
    """``root`` (``object``) is a multi-pod ``kind`` of class ``cls`` without a gang; for ``oldObject``, the
    UPDATE waiver: the old object declared the class already."""
    backend = policy.classes[cls].gang.backend
    template = _walk(root, kind.templates[0].path)
    assert template is not None
    tpl, guards = template
    key = cel_string(policy.keys.workload)
    group, _, version = kind.api_version.rpartition("/")
    request = (
        f"request.resource.group == {cel_string(group)} && request.resource.version == {cel_string(version)} && "
        f"request.resource.resource == {cel_string(kind.spec.plural)}"
    )
    labels = f"{tpl}.metadata.labels"
    declared = " && ".join(
        [*guards, f"has({tpl}.metadata)", f"has({labels})", f"{key} in {labels}",
         f"{labels}[{key}] == {cel_string(cls)}"]
    )
    keys = kind.backends.get(backend.value) if backend is not GangBackend.NONE else None
    if keys is None:  # no way to gang: every multi-pod object of the class is denied
        missing = "true"
    else:
        parts = []
        for k in keys:
            present = _present(tpl if k.template else "object", k.path) if _denying(k, backend) else None
            if present is not None:
                parts.append(f"(n >= {k.min_pods} && !({present}))" if k.min_pods > 2 else f"!({present})")
        if not parts:
            return None
        missing = " || ".join(parts)
    multi = _pod_count(kind, "object", f"n > 1 && ({missing})")
    if multi is None:
        return None
    if root == "oldObject":
        return f"({request} &&\n    {declared})"
    return f"({request} &&\n    {declared} &&\n    ({resolution_denies(policy, cel_string(cls))}) &&\n    {multi})"


@check(
    "gang-required",
    "missing-gang",
    "a multi-pod workload of a gang-required class carries no gang its backend reads (the webhook writes the "
    "gang keys; retry when it is up), or its class has no gang backend for this kind",
    over="object",
    scope="stored",
)
def gang_missing(policy: Policy, root: str, cls: str) -> str | None:  # type: ignore[override]
    if not policy.classes[cls].gang.required:
        return None
    tests = [t for kind in _gang_kinds(policy) if (t := _kind_test(policy, kind, root, cls)) is not None]
    return "(" + " ||\n  ".join(tests) + ")" if tests else None
