"""Workload kinds as data: where a kind keeps its pod templates, how many pods it runs, and where
each gang backend reads its keys.

The built-in kinds (``builtin_kinds.yaml``, shipped in the package) and the policy's
``workloadKinds`` are the same model, so a platform team adds its own CRD the way Gatekeeper's
ExpansionTemplate does: by describing it, not by changing code. Paths are Kubernetes field paths
with wildcards: ``spec.tasks[*].template`` (every list item), ``spec.pytorchReplicaSpecs.*.template``
(every map value) and ``metadata.labels[kueue.x-k8s.io/queue-name]`` (a key with dots or slashes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import field as derived
from enum import StrEnum
from functools import lru_cache
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel


class Wild(StrEnum):
    LIST = "[*]"
    MAP = "*"


Part = str | int | Wild
_SEGMENT = re.compile(r"([^.\[\]]+)|\[([^\]]*)\]|(\.)")


def parse_path(text: str) -> tuple[Part, ...]:
    """``spec.tasks[*].template`` -> ("spec", "tasks", Wild.LIST, "template"); "" is the object itself."""
    parts: list[Part] = []
    pos, expect_name = 0, True
    while pos < len(text):
        match = _SEGMENT.match(text, pos)
        if match is None:
            raise ValueError(f"{text!r}: unexpected {text[pos]!r} at column {pos + 1}")
        name, bracket, dot = match.groups()
        if dot is not None:
            if expect_name:
                raise ValueError(f"{text!r}: empty segment at column {pos + 1}")
            expect_name = True
        elif name is not None:
            if not expect_name:
                raise ValueError(f"{text!r}: missing '.' before {name!r}")
            parts.append(Wild.MAP if name == "*" else name)
            expect_name = False
        else:
            if bracket == "":
                raise ValueError(f"{text!r}: empty brackets at column {pos + 1}")
            parts.append(Wild.LIST if bracket == "*" else int(bracket) if bracket.isdigit() else bracket)
            expect_name = False
        pos = match.end()
    if text and expect_name:
        raise ValueError(f"{text!r}: ends with '.'")
    return tuple(parts)


def _path(value: str) -> str:
    parse_path(value)
    return value


def wildcards(path: tuple[Part, ...]) -> int:
    return sum(1 for p in path if isinstance(p, Wild))


FieldPath = Annotated[str, AfterValidator(_path)]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=False)


class Count(Model):
    """One factor of a template's pod count: the first of ``fields`` that holds an integer."""

    fields: tuple[FieldPath, ...] = Field(..., min_length=1, description="first integer found wins")
    default: int = Field(1, ge=0, description="when none of the fields is set")
    at_most: FieldPath | None = Field(None, description="capped by this field (a Job's completions)")
    minus: int = Field(0, ge=0, description="subtracted when minus_when is present (LWS: size - 1 workers)")
    minus_when: FieldPath | None = Field(None, description="the field whose presence makes minus apply")


class RuntimePatchKind(Model):
    """Where a kind with no pod template of its own lets a manager patch the template its runtime
    stamps out: Kubeflow Trainer's ``TrainJob.spec.runtimePatches`` (a list keyed by ``manager``, each
    ``trainingRuntimeSpec.template.spec.replicatedJobs[name].template.spec.template`` with labels,
    annotations and a restricted pod spec). The webhook reads every manager's patch of ``job`` (they
    all reach the pods) and writes its own placement into the entry named ``manager``."""

    path: FieldPath = Field(..., description="the list of patches on the object (TrainJob: spec.runtimePatches)")
    job: str = Field("node", min_length=1, description="the replicated job whose pod template carries the devices")
    manager: str = Field(
        "{prefix}/webhook",
        min_length=1,
        max_length=253,
        description="the webhook's own entry ({prefix}: intent prefix)",
    )


class TemplateKind(Model):
    """One pod template (or a list/map of them) inside the object."""

    path: FieldPath = Field(..., description="the PodTemplateSpec; '' for a Pod itself")
    replicas: tuple[Count, ...] = Field((), description="pods per gang: the product of these factors (none: 1)")
    role: FieldPath | None = Field(
        None, description="field holding the template's role name (default: the key of its last map wildcard)"
    )
    name: str | None = Field(None, description="a fixed role name (head, leader)")
    gang: bool = Field(True, description="the template's pods join the workload's gang (false: a RayJob submitter)")
    resources: FieldPath | None = Field(
        None,
        description="instead of a pod template, one container's ResourceRequirements (TrainJob's "
        "resourcesPerNode): judged, never patched",
    )
    container: str = Field("main", description="the name of that container (with resources)")
    env: FieldPath | None = Field(
        None, description="with resources: that container's env list on the object (TrainJob spec.trainer.env)"
    )
    runtime_patches: RuntimePatchKind | None = Field(
        None, description="with resources: the runtime patches that carry the rest of the pod template (TrainJob)"
    )

    @model_validator(mode="after")
    def _projection(self) -> TemplateKind:
        if self.resources is None and (self.env is not None or self.runtime_patches is not None):
            raise ValueError("env and runtimePatches describe a template built from resources: set resources too")
        return self


class GangValue(StrEnum):
    SCHEDULER = "scheduler"  # the class's gang scheduler name (volcano by default)
    SIZE = "size"  # pods in the gang
    NAME = "name"  # the gang's name (the object's name; a bare Pod's gang annotation)
    QUEUE = "queue"  # the Kueue LocalQueue of the namespace or class
    PRIORITY_CLASS = "priorityClass"  # the class's priorityClassName
    REPLICAS = "replicas"  # the template's own pod count (checked only: a Volcano task's minAvailable)


class GangKey(Model):
    """A key a backend reads, with the value the webhook writes there (when absent) and checks."""

    path: FieldPath = Field(..., description="on the object, or relative to each template with template: true")
    template: bool = Field(False, description="the path is relative to each pod template that joins the gang")
    value: GangValue | None = Field(
        None, description="scheduler | size | name | queue | priorityClass | replicas (checked only)"
    )
    literal: str | None = Field(None, description="a fixed value instead of a derived one")
    min_pods: int = Field(2, ge=1, description="written only for gangs of at least this many pods")
    needs_name: bool = Field(False, description="written only when the gang has a name")
    write: bool = Field(True, description="false: only checked (a default the controller applies itself)")
    check: Literal["none", "below", "differs"] = Field(
        "none", description="a present value below (or other than) the derived one is gang-incomplete"
    )
    size_name: str = Field("replicas", description="what the size is called in messages")

    @model_validator(mode="after")
    def _one_value(self) -> GangKey:
        if (self.value is None) == (self.literal is None):
            raise ValueError("set exactly one of value and literal")
        return self


class TopologyKey(Model):
    """An annotation the kind's controller turns into packing (LWS/JobSet exclusive-topology)."""

    path: FieldPath = Field(..., description="where the node label key of the topology level goes")
    required_only: bool = Field(False, description="only for ':required' topology")


class Backend(StrEnum):
    VOLCANO = "volcano"
    KUEUE = "kueue"
    COSCHEDULING = "coscheduling"
    KAI = "kai"


class GangKind(Model):
    name: Literal["object", "intent"] = Field("object", description="the gang's name: the object's or the intent's")
    size: Literal["replicas", "intent", "nodes"] = Field(
        "replicas",
        description="Σ template pods, the gang-size intent, or one pod per node of the template's pool (a DaemonSet)",
    )
    carrier: Literal["kind", "template"] = Field(
        "kind",
        description="where the gang is spelled: the backend keys of `backends` (kind), or, for controllers that "
        "create plain Pods from their template (apps/v1), the pod-group keys those Pods inherit (template)",
    )
    selector: str | None = Field(
        None, description="label the controller puts on every pod with the gang's name ({prefix}: intent prefix)"
    )
    write_selector: bool = Field(False, description="the webhook writes the selector label itself (bare pods)")
    groups: FieldPath | None = Field(None, description="one gang per group: the number of groups (LWS replicas)")


class ScaleKind(Model):
    """The kind's ``scale`` subresource (``kubectl scale``, a HorizontalPodAutoscaler): an
    ``autoscaling/v1`` Scale whose ``spec.replicas`` the apiserver writes into one field of the object
    (a CRD's ``subresources.scale.specReplicasPath``). A scale changes the pod count the gang rules
    read, so the validating webhook intercepts ``<resource>/scale`` and judges the object it scales
    with that field set."""

    replicas: FieldPath = Field(
        ..., description="the field Scale.spec.replicas sets (a CRD's specReplicasPath without the leading dot)"
    )

    @model_validator(mode="after")
    def _concrete(self) -> ScaleKind:
        path = parse_path(self.replicas)
        if not path or wildcards(path):
            raise ValueError(f"scale.replicas {self.replicas!r} must name one field (no wildcards)")
        return self


class WorkloadKindSpec(Model):
    """One workload kind: a built-in or a ``workloadKinds`` entry of the policy."""

    api_version: str = Field(..., min_length=1, description="the CRD's group/version, e.g. kubeflow.org/v1")
    kind: str = Field(..., min_length=1, description="the CRD's kind, e.g. PyTorchJob")
    name: str | None = Field(None, description="display name in metrics and messages (default: kind)")
    resource: str | None = Field(
        None, description="the resource (plural) the webhook configurations intercept (default: kind, lower case + s)"
    )
    mutate: bool = Field(..., description="patched at CREATE (true) or only validated as its pods will be")
    scope: Literal["Namespaced", "Cluster"] = Field(
        "Namespaced", description="Cluster: checked offline only (the webhooks intercept namespaced kinds)"
    )
    templates: tuple[TemplateKind, ...] = Field(..., min_length=1, description="where its pod templates are")
    gang: GangKind = Field(GangKind(), description="how its gang is named, sized and selected")
    backends: dict[Backend, tuple[GangKey, ...]] = Field(
        default_factory=dict, description="per gang backend, the keys its integration reads; absent: no integration"
    )
    topology: tuple[TopologyKey, ...] = Field(
        (), description="annotations the kind's controller turns into packing (given the level's node label)"
    )
    network_topology: FieldPath | None = Field(
        None, description="Volcano networkTopology field of the object (Volcano Job spec.networkTopology)"
    )
    validate_fields: bool = Field(False, description="check the Volcano Job field names (unknown-field)")
    tasks: FieldPath | None = Field(
        None,
        description="a list of tasks read as Volcano reads them: dependsOn delays a task's pods, minAvailable "
        "counts per task and for the job (Volcano Job: spec.tasks)",
    )
    batch_job: FieldPath | None = Field(
        None,
        description="where a batch/v1 Job (its metadata and spec) is in the object: '' for a Job, "
        "spec.jobTemplate for a CronJob; Kueue's job-min-parallelism and the Job's parallelism are read there",
    )
    per_node: bool = Field(
        False,
        description="its controller runs one pod on every node it selects (DaemonSet): neither its templates "
        "nor the pods it owns are pinned to a pool",
    )
    schedulers: tuple[str, ...] = Field(
        (),
        description="schedulers the kind's own controller or webhook sets on it (a Volcano Job: volcano); "
        "always allowed on its objects by scheduling-not-allowed",
    )
    sample: dict | None = Field(
        None, description="a sample object; lint reports template paths that match nothing in it"
    )
    scale: ScaleKind | None = Field(
        None, description="its scale subresource, if its CRD serves one: where Scale.spec.replicas lands"
    )

    @property
    def display(self) -> str:
        return self.name or self.kind

    @property
    def plural(self) -> str:
        return self.resource or self.kind.lower() + "s"

    @model_validator(mode="after")
    def _wildcards(self) -> WorkloadKindSpec:
        for tpl in self.templates:
            depth = wildcards(parse_path(tpl.path))
            for count in tpl.replicas:
                for field in (*count.fields, count.at_most, count.minus_when):
                    if field is not None and wildcards(parse_path(field)) > depth:
                        raise ValueError(f"{field!r} has more wildcards than its template path {tpl.path!r}")
            if tpl.role is not None and wildcards(parse_path(tpl.role)) > depth:
                raise ValueError(f"role {tpl.role!r} has more wildcards than its template path {tpl.path!r}")
        return self


class KindsFile(Model):
    kinds: tuple[WorkloadKindSpec, ...] = Field(..., description="the built-in workload kinds")


@lru_cache(maxsize=1)
def builtin_kinds() -> tuple[WorkloadKindSpec, ...]:
    """The shipped table, validated by the same model as the policy's ``workloadKinds``."""
    from webhook.policy.shipped import load_shipped

    return KindsFile.model_validate(load_shipped("builtin_kinds.yaml")).kinds


# --- compiled form: what the engine reads on every review -------------------------------------


Path = tuple[Part, ...]


def bind(path: Path, bindings: tuple[str | int, ...]) -> tuple[str | int, ...] | None:
    """``path`` with its wildcards replaced, in order, by a template's concrete keys/indices."""
    if not bindings or not any(isinstance(p, Wild) for p in path):
        return path  # type: ignore[return-value]
    out: list[str | int] = []
    i = 0
    for part in path:
        if isinstance(part, Wild):
            if i >= len(bindings):
                return None
            out.append(bindings[i])
            i += 1
        else:
            out.append(part)
    return tuple(out)


def lookup(obj: object, path: tuple[str | int, ...] | None) -> object:
    if path is None:
        return None
    node = obj
    for part in path:
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            return None
    return node


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class CompiledCount:
    fields: tuple[Path, ...]
    default: int
    at_most: Path | None
    minus: int
    minus_when: Path | None

    def value(self, obj: object, bindings: tuple[str | int, ...]) -> int:
        found = self.default
        for field in self.fields:
            got = _integer(lookup(obj, bind(field, bindings)))
            if got is not None:
                found = got
                break
        if self.at_most is not None:
            cap = _integer(lookup(obj, bind(self.at_most, bindings)))
            if cap is not None and cap < found:
                found = cap
        if self.minus and self.minus_when is not None and lookup(obj, bind(self.minus_when, bindings)) is not None:
            found -= self.minus
        return max(0, found)  # a negative count creates no pods (workload-invalid says so)


@dataclass(frozen=True, slots=True)
class CompiledTemplate:
    path: Path
    replicas: tuple[CompiledCount, ...]
    role: Path | None
    name: str | None
    gang: bool
    resources: Path | None
    container: str
    env: Path | None = None
    patches: Path | None = None  # runtime patches (RuntimePatchKind.path)
    patch_job: str = "node"
    patch_manager: str = ""  # {prefix} not yet replaced: the engine does it with the policy's prefix


@dataclass(frozen=True, slots=True)
class CompiledKey:
    path: Path
    template: bool
    value: GangValue | None
    literal: str | None
    min_pods: int
    needs_name: bool
    write: bool
    check: str
    size_name: str
    text: str  # the path as the table wrote it (messages)
    as_string: bool = derived(init=False)
    """Values under labels/annotations are strings; elsewhere sizes are integers."""
    wild: bool = derived(init=False)
    """The path has a wildcard, bound per template (``bind``); derived here, once per policy, since the
    gang step and rules ask it of every key on every review."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "as_string", len(self.path) >= 2 and self.path[-2] in ("labels", "annotations"))
        object.__setattr__(self, "wild", any(isinstance(p, Wild) for p in self.path))


@dataclass(frozen=True, slots=True, eq=False)
class CompiledKind:
    """A ``WorkloadKindSpec`` with its paths parsed, built once per policy (or once for the built-ins)."""

    spec: WorkloadKindSpec
    name: str
    mutate: bool
    templates: tuple[CompiledTemplate, ...]
    backends: dict[str, tuple[CompiledKey, ...]]
    topology: tuple[tuple[Path, bool], ...]
    network_topology: Path | None
    groups: Path | None
    builtin: bool = False
    scale: Path | None = None  # where a Scale's spec.replicas lands (ScaleKind.replicas)
    tasks: Path | None = None  # a Volcano-style task list (WorkloadKindSpec.tasks)
    batch_job: Path | None = None  # where the batch Job is ((): the object itself)
    per_node: bool = False  # one pod per node (WorkloadKindSpec.per_node)

    @property
    def api_version(self) -> str:
        return self.spec.api_version

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def root_template(self) -> bool:
        """The object is itself the pod (a Pod)."""
        return len(self.templates) == 1 and self.templates[0].path == ()

    @classmethod
    def build(cls, spec: WorkloadKindSpec, builtin: bool = False) -> CompiledKind:
        def count(c: Count) -> CompiledCount:
            return CompiledCount(
                tuple(parse_path(f) for f in c.fields),
                c.default,
                parse_path(c.at_most) if c.at_most else None,
                c.minus,
                parse_path(c.minus_when) if c.minus_when else None,
            )

        templates = tuple(
            CompiledTemplate(
                path=parse_path(t.path),
                replicas=tuple(count(c) for c in t.replicas),
                role=parse_path(t.role) if t.role else None,
                name=t.name,
                gang=t.gang,
                resources=parse_path(t.resources) if t.resources else None,
                container=t.container,
                env=parse_path(t.env) if t.env else None,
                patches=parse_path(t.runtime_patches.path) if t.runtime_patches else None,
                patch_job=t.runtime_patches.job if t.runtime_patches else "node",
                patch_manager=t.runtime_patches.manager if t.runtime_patches else "",
            )
            for t in spec.templates
        )
        backends = {
            backend.value: tuple(
                CompiledKey(
                    parse_path(k.path),
                    k.template,
                    k.value,
                    k.literal,
                    k.min_pods,
                    k.needs_name,
                    k.write,
                    k.check,
                    k.size_name,
                    k.path,
                )
                for k in keys
            )
            for backend, keys in spec.backends.items()
        }
        return cls(
            spec=spec,
            name=spec.display,
            mutate=spec.mutate,
            templates=templates,
            backends=backends,
            topology=tuple((parse_path(t.path), t.required_only) for t in spec.topology),
            network_topology=parse_path(spec.network_topology) if spec.network_topology else None,
            groups=parse_path(spec.gang.groups) if spec.gang.groups else None,
            builtin=builtin,
            scale=parse_path(spec.scale.replicas) if spec.scale else None,
            tasks=parse_path(spec.tasks) if spec.tasks else None,
            batch_job=parse_path(spec.batch_job) if spec.batch_job is not None else None,
            per_node=spec.per_node,
        )


@lru_cache(maxsize=1)
def builtin_table() -> dict[tuple[str, str], CompiledKind]:
    return {(k.api_version, k.kind): CompiledKind.build(k, builtin=True) for k in builtin_kinds()}


def kind_table(extra: tuple[WorkloadKindSpec, ...]) -> dict[tuple[str, str], CompiledKind]:
    """The built-ins plus a policy's ``workloadKinds`` (a policy entry replaces a built-in of the same type)."""
    if not extra:
        return builtin_table()
    table = dict(builtin_table())
    for spec in extra:
        table[(spec.api_version, spec.kind)] = CompiledKind.build(spec)
    return table
