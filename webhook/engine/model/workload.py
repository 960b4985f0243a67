"""Where the pod templates live in each kind the product understands: read from the kind table.

The engine never special-cases kinds: a Pod is "a template at the root", a Job is "one template at
spec.template", a Volcano Job is "one template per task", a PyTorchJob "one per replica spec". Those
facts are data (``webhook/policy/builtin_kinds.yaml`` and the policy's ``workloadKinds``); this module
turns an object and its kind's row into the ``Template`` list every mutation step and rule reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from webhook.policy.kinds import CompiledKind, CompiledTemplate, Wild, bind, builtin_table, lookup

if TYPE_CHECKING:
    from webhook.policy.compiled import Policy


@dataclass(slots=True)
class Template:
    """One pod template inside an object: JSON paths to its metadata and spec, and its replica count.

    Read-only by convention; not frozen, since one or more are built per review (see ``Decision``)."""

    path: tuple[str | int, ...]  # path of the template itself (() for a Pod)
    metadata: dict[str, Any]
    spec: dict[str, Any]
    replicas: int  # pods of this template in one gang
    task: str | None = None  # the template's role: Volcano task name, replica type, worker group
    gang: bool = True  # its pods join the workload's gang
    virtual: bool = False  # built from a resources field (TrainJob): judged, never patched
    bindings: tuple[str | int, ...] = ()  # the concrete keys/indices of the kind's path wildcards
    resources_at: tuple[str | int, ...] = ()  # virtual templates: where the container's resources are
    rule: CompiledTemplate | None = None  # virtual templates: the table row, to read it again after mutation

    @property
    def meta_path(self) -> tuple[str | int, ...]:
        return (*self.path, "metadata")

    @property
    def spec_path(self) -> tuple[str | int, ...]:
        return (*self.path, "spec")

    def dotted(self, *rest: str | int) -> str:
        if self.virtual:  # no template of its own: its metadata is the object's, its resources a field
            if rest[:1] == ("metadata",):
                return dotted(rest)
            if rest[:1] == ("spec",) and self.resources_at:
                own = rest[1:2] == ("containers",) and rest[3:4] in ((), ("resources",))  # the object's field
                if own or self.rule is None or self.rule.patches is None:
                    return dotted((*self.resources_at, *(rest[4:] if rest[3:4] == ("resources",) else ())))
                # any other pod-spec field reaches the pods through the runtime patches
                return dotted(self.rule.patches) + PATCH_TEXT + "".join(
                    f"[{p}]" if isinstance(p, int) else f".{p}" for p in rest[1:]
                )
        return dotted((*self.path, *rest))


def classify(obj: Any, policy: Policy | None = None) -> CompiledKind | None:
    """The kind table's row for ``obj`` (the policy's table, with its ``workloadKinds``), or None."""
    if not isinstance(obj, dict):
        return None
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    table = policy.kinds if policy is not None else builtin_table()
    return table.get((api_version, kind))


def _map(value: Any) -> dict[str, Any]:
    return value if type(value) is dict or isinstance(value, dict) else {}


def _expand(node: Any, path: tuple, at: int, concrete: tuple, bound: tuple, out: list) -> None:
    """Every concrete (path, bindings, node) the wildcard path matches, in document order."""
    while at < len(path):
        part = path[at]
        if part is Wild.LIST:
            if isinstance(node, list):
                for i, item in enumerate(node):
                    _expand(item, path, at + 1, (*concrete, i), (*bound, i), out)
            return
        if part is Wild.MAP:
            if isinstance(node, dict):
                for key, item in node.items():
                    if isinstance(key, str):
                        _expand(item, path, at + 1, (*concrete, key), (*bound, key), out)
            return
        if not isinstance(node, dict):
            return
        node = node.get(part)
        if node is None:
            return
        concrete = (*concrete, part)
        at += 1
    out.append((concrete, bound, node))


def _template(obj: dict[str, Any], rule: CompiledTemplate, path: tuple, bound: tuple, node: Any) -> Template:
    replicas = 1
    for count in rule.replicas:
        replicas *= count.value(obj, bound)
    role = rule.name
    if rule.role is not None:
        found = lookup(obj, bind(rule.role, bound))
        role = found if isinstance(found, str) else role
    elif role is None and bound and isinstance(bound[-1], str):
        role = bound[-1]
    node = _map(node)
    if rule.resources is not None:  # one container whose resources the object states (TrainJob)
        meta, spec = projected(obj, rule)
        return Template(path, meta, spec, replicas, role, rule.gang, True, bound, rule.resources, rule)  # type: ignore[arg-type]
    return Template(path, _map(node.get("metadata")), _map(node.get("spec")), replicas, role, rule.gang, False, bound)


PATCH_TEXT = "[*].trainingRuntimeSpec.template.spec.replicatedJobs[*].template.spec.template.spec"
"""Where a runtime patch keeps its pod spec (messages; see ``projected``)."""
PATCH_SPEC_FIELDS = (
    "serviceAccountName",
    "volumes",
    "imagePullSecrets",
    "securityContext",
    "nodeSelector",
    "affinity",
    "tolerations",
    "schedulingGates",
)
"""The pod-spec fields a Trainer runtime patch may set (``PodSpecPatch``), besides containers."""
PATCH_CONTAINER_FIELDS = ("env", "volumeMounts", "securityContext")
"""The container fields a runtime patch may set (``ContainerPatch``), matched to a container by name."""
_BY_NAME = frozenset({"volumes", "imagePullSecrets", "schedulingGates"})


def patch_pods(obj: Any, rule: CompiledTemplate) -> list[tuple[int, int, dict[str, Any]]]:
    """(patch index, replicated-job index, pod template) of every runtime patch of the rule's job."""
    patches = lookup(obj, rule.patches) if rule.patches is not None else None
    out: list[tuple[int, int, dict[str, Any]]] = []
    if not isinstance(patches, list):
        return out
    for i, entry in enumerate(patches):
        jobs = lookup(entry, ("trainingRuntimeSpec", "template", "spec", "replicatedJobs"))
        if not isinstance(jobs, list):
            continue
        for j, job in enumerate(jobs):
            if isinstance(job, dict) and job.get("name") == rule.patch_job:
                out.append((i, j, _map(lookup(job, ("template", "spec", "template")))))
    return out


def projected(obj: Any, rule: CompiledTemplate) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pod template a kind without one will run (TrainJob): its container's resources and env
    from the object, the rest from every runtime patch of its job, merged in list order as the
    controller applies them (maps key by key, lists keyed by name item by item, tolerations added
    up: a pod tolerates what any patch lets it tolerate)."""
    container: dict[str, Any] = {"name": rule.container}
    resources = lookup(obj, rule.resources) if rule.resources is not None else None
    if isinstance(resources, dict):
        container["resources"] = resources
    env = lookup(obj, rule.env) if rule.env is not None else None
    if isinstance(env, list):
        container["env"] = env
    spec: dict[str, Any] = {"containers": [container]}
    meta: dict[str, Any] = {}
    for _, _, pod in patch_pods(obj, rule):
        pmeta = _map(pod.get("metadata"))
        for section in ("labels", "annotations"):
            values = pmeta.get(section)
            if isinstance(values, dict):
                meta[section] = {**meta.get(section, {}), **values}
        pspec = _map(pod.get("spec"))
        for field in PATCH_SPEC_FIELDS:
            value = pspec.get(field)
            if value is None:
                continue
            current = spec.get(field)
            if field == "nodeSelector" and isinstance(value, dict):
                spec[field] = {**(current if isinstance(current, dict) else {}), **value}
            elif field == "tolerations" and isinstance(value, list):
                have = current if isinstance(current, list) else []
                spec[field] = [*have, *(t for t in value if t not in have)]
            elif field in _BY_NAME and isinstance(value, list) and isinstance(current, list):
                names = {item.get("name") for item in value if isinstance(item, dict)}
                spec[field] = [i for i in current if not (isinstance(i, dict) and i.get("name") in names)] + value
            else:
                spec[field] = value
        for group in ("containers", "initContainers"):
            for patch in pspec.get(group) or ():
                if not isinstance(patch, dict) or not isinstance(patch.get("name"), str):
                    continue
                if group == "containers" and patch["name"] == rule.container:
                    target = container
                else:
                    items = spec.setdefault(group, [])
                    target = next((c for c in items if c.get("name") == patch["name"]), None)
                    if target is None:
                        target = {"name": patch["name"]}
                        items.append(target)
                for field in PATCH_CONTAINER_FIELDS:
                    if patch.get(field) is not None:
                        target[field] = patch[field]
    return meta, spec


def templates(obj: dict[str, Any], kind: CompiledKind) -> list[Template]:
    """The object's pod templates, in the order of the kind's table and then of the document."""
    out: list[Template] = []
    for rule in kind.templates:
        if rule.path == ():
            out.append(Template((), _map(obj.get("metadata")), _map(obj.get("spec")), 1, rule.name, rule.gang))
            continue
        found: list = []
        _expand(obj, rule.path, 0, (), (), found)
        for path, bound, node in found:
            out.append(_template(obj, rule, path, bound, node))
    return out


def gangs(obj: dict[str, Any], kind: CompiledKind) -> int:
    """How many gangs the object makes: one, or one per group (LeaderWorkerSet replicas)."""
    if kind.groups is None:
        return 1
    value = lookup(obj, kind.groups)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 1


def dotted(path: tuple[str | int, ...] | list[str | int]) -> str:
    """Kubernetes field-path style: ``spec.containers[0].resources.limits[nvidia.com/gpu]``.

    Cached (bounded) like ``patch.pointer``: intent keys, findings and the resolve memo name the same
    few dozen paths on every review."""
    return _dotted(tuple(path))


@lru_cache(maxsize=4096)
def _dotted(path: tuple[str | int, ...]) -> str:
    out: list[str] = []
    for part in path:
        if isinstance(part, int) or "." in part or "/" in part:
            out.append(f"[{part}]")
        else:
            out.append(("." if out else "") + part)
    return "".join(out)
