"""The policy format (``apiVersion: gpu-admission.io/v1``, ``kind: GPUPolicy``) as strict pydantic models.

Unknown fields are errors, every model is frozen, and field names on the wire are camelCase like
every Kubernetes object the platform team already writes. One file is a *document*; all documents
in the policy directory are merged into one ``PolicySpec`` by ``webhook.policy.loader``.
"""

from __future__ import annotations

import re
from datetime import date
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from webhook.actions import Action, Enforcement
from webhook.policy.kinds import (  # noqa: F401  (re-exported: the field reference documents them)
    Count,
    GangKey,
    GangKind,
    RuntimePatchKind,
    ScaleKind,
    TemplateKind,
    TopologyKey,
    WorkloadKindSpec,
)
from webhook.policy.stacks import stacks
from webhook.quantity import QuantityError, parse_quantity

API_VERSION = "gpu-admission.io/v1"
KIND = "GPUPolicy"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_RESOURCE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_MIG_PROFILE = re.compile(r"^([1-8])g\.([0-9]+)gb([+-][a-z.]+)?$")


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=False)


def _quantity(value: object) -> str:
    try:
        amount = parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None
    if amount <= 0:
        raise ValueError(f"{value!r} must be greater than zero")
    return str(value)


def _dns_label(value: str) -> str:
    if not _DNS_LABEL.match(value) or len(value) > 63:
        raise ValueError(f"{value!r} must be a DNS-1123 label (lower case, digits, '-'; at most 63)")
    return value


def _label_key(value: str) -> str:
    if not _LABEL_KEY.match(value):
        raise ValueError(f"{value!r} is not a valid Kubernetes label key")
    return value


Quantity = Annotated[str | int, AfterValidator(_quantity)]
Name = Annotated[str, AfterValidator(_dns_label)]
LabelKey = Annotated[str, AfterValidator(_label_key)]


class Isolation(StrEnum):
    EXCLUSIVE = "exclusive"
    MIG = "mig"
    SHARED = "shared"


class TopologyLevel(StrEnum):
    NODE = "node"
    SWITCH = "switch"
    RACK = "rack"
    ZONE = "zone"


TOPOLOGY_ORDER = (TopologyLevel.NODE, TopologyLevel.SWITCH, TopologyLevel.RACK, TopologyLevel.ZONE)


SharingProvider = StrEnum(  # type: ignore[misc]
    "SharingProvider", {sid.upper().replace("-", "_"): sid for sid in stacks().ids()}
)
"""The ``sharing.provider`` values: the ids of the shipped sharing-stack table (``sharing_stacks.yaml``),
an enum so the schema and the policy's errors list them. No code names a member: what a stack means
is read from its table entry (``webhook.policy.stacks.stack``)."""


class GangBackend(StrEnum):
    NONE = "none"
    VOLCANO = "volcano"
    KUEUE = "kueue"
    COSCHEDULING = "coscheduling"
    KAI = "kai"


class QoS(StrEnum):
    ANY = "Any"
    GUARANTEED = "Guaranteed"


# --- GPU catalog -----------------------------------------------------------------------------


class MigProfile(Model):
    """One MIG profile of a GPU model: ``1g.10gb`` with at most ``max`` instances per GPU."""

    name: str
    max: int = Field(1, ge=1, le=8)
    memory: Quantity | None = Field(
        None,
        description="usable memory of the GPU instance as `nvidia-smi mig -lgip` lists it "
        "(default: the number in the name, in GiB)",
    )

    @field_validator("name")
    @classmethod
    def _profile_name(cls, value: str) -> str:
        if not _MIG_PROFILE.match(value):
            raise ValueError(f"{value!r} is not a MIG profile name like '1g.10gb' or '1g.10gb+me'")
        return value


class GPUModel(Model):
    memory: Quantity = Field(..., description="nominal memory per card (the size in the product name)")
    usable_memory: Quantity | None = Field(
        None,
        description="memory per card as nodes report it (GFD `nvidia.com/gpu.memory`, MiB); default: memory",
    )
    product: str | None = Field(None, description="GFD `nvidia.com/gpu.product` value (single MIG strategy)")
    mig: tuple[MigProfile, ...] = ()
    layouts: dict[str, dict[str, Annotated[int, Field(ge=0, le=8)]]] = Field(
        default_factory=dict,
        description="mig-parted configs (the `nvidia.com/mig.config` label's values) -> profile: instances per GPU",
    )
    memory_source: str = Field("", description="where usableMemory comes from (documentation only)")
    mig_source: str = Field("", description="where the profiles' memory comes from (documentation only)")

    @field_validator("mig", mode="before")
    @classmethod
    def _pairs(cls, value: object) -> object:
        # The built-in catalog writes profiles as [name, max, memory] triples; policies may write
        # [name, max] pairs or objects.
        if isinstance(value, list):
            return [
                dict(zip(("name", "max", "memory"), item, strict=False))
                if isinstance(item, list | tuple) and len(item) in (2, 3)
                else item
                for item in value
            ]
        return value


class DeviceClassKind(StrEnum):
    WHOLE = "whole"
    MIG = "mig"
    SHARED = "shared"
    OTHER = "other"


_DEVICE_CLASS_NAME = re.compile(r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _device_class_name(value: str) -> str:
    if not _DEVICE_CLASS_NAME.match(value) or len(value) > 253:
        raise ValueError(
            f"{value!r} is not a DeviceClass name (a DNS subdomain such as 'gpu.nvidia.com', "
            "or '*.' and one such as '*.gpu.nvidia.com')"
        )
    return value


DeviceClassName = Annotated[str, AfterValidator(_device_class_name)]


class DeviceClass(Model):
    """What a DRA DeviceClass hands out (a catalogue entry): whole cards, MIG devices, shares, or no GPU."""

    kind: DeviceClassKind
    driver: str | None = Field(None, description="the DRA driver serving the class (informational)")
    profile: str | None = Field(None, description="mig: the profile every device of the class has")
    memory: Quantity | None = Field(None, description="memory of each device, when the class fixes it")
    extended_resource_name: str | None = Field(
        None, description="the extended resource the class serves (DeviceClass spec.extendedResourceName)"
    )

    @field_validator("profile")
    @classmethod
    def _profile(cls, value: str | None) -> str | None:
        if value is not None and not _MIG_PROFILE.match(value):
            raise ValueError(f"{value!r} is not a MIG profile name like '1g.10gb'")
        return value

    @field_validator("extended_resource_name")
    @classmethod
    def _resource(cls, value: str | None) -> str | None:
        if value is not None and not _RESOURCE_NAME.match(value):
            raise ValueError(f"{value!r} is not an extended resource name like 'nvidia.com/gpu'")
        return value


# --- pools -------------------------------------------------------------------------------------


class Toleration(Model):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    def as_k8s(self) -> dict[str, object]:
        return self.model_dump(by_alias=True, exclude_none=True)


class Taint(Model):
    """A taint every node of the pool carries (what the scheduler's TaintToleration filter reads)."""

    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


DeviceTaintEffect = Literal["None", "NoSchedule", "NoExecute"]


class DeviceTaintSpec(Model):
    """A taint DRA drivers (or the platform) put on devices (KEP-5055), as the webhook judges a claim
    that tolerates it: tolerating an informational taint (effect ``None``) changes nothing; tolerating one
    that keeps devices out of service (``NoSchedule``, ``NoExecute``) lets the claim onto them."""

    effect: DeviceTaintEffect = Field(
        ..., description="None (informational, may be tolerated by key), NoSchedule or NoExecute"
    )
    description: str = Field("", description="what the taint means, for the platform team")


def _device_taint_key(value: str) -> str:
    if value == "*":
        return value
    if not value:
        raise ValueError("a device taint key is empty; write '*' to allow a blanket toleration")
    return _label_key(value)


DeviceTaintKey = Annotated[str, AfterValidator(_device_taint_key)]


class MigConfig(Model):
    """How the pool's cards are partitioned: by a mig-parted layout name or by profiles (with counts).

    Only what is there can be given out: translation, ``mig-profile-unavailable``, the gang capacity
    check, the waste report and DRA templates read the pool's geometry, never the model's full list."""

    strategy: Literal["mixed", "single"] = "mixed"
    layout: str | None = Field(
        None,
        description="the mig-parted config the nodes run (their `nvidia.com/mig.config` label), e.g. all-balanced",
    )
    profiles: tuple[str, ...] | dict[str, Annotated[int, Field(ge=1, le=8)]] | None = Field(
        None,
        description="profiles the pool's nodes are partitioned into, as a list or as profile: instances per GPU; "
        "default (no layout either): every profile of the model",
    )

    @model_validator(mode="after")
    def _one_geometry(self) -> MigConfig:
        if self.layout is not None and self.profiles is not None:
            raise ValueError("set either layout (a mig-parted config name) or profiles, not both")
        return self


class SharingConfig(Model):
    provider: SharingProvider
    renamed: bool = Field(
        False,
        description="the device plugin advertises the stack's renamed resource instead of nvidia.com/gpu "
        "(time-slicing's renameByDefault: nvidia.com/gpu.shared)",
    )
    cores: int | None = Field(
        None, ge=1, le=100, description="percent of a card's compute per slice, for stacks with a cores resource "
        "(hami: nvidia.com/gpucores)"
    )

    @model_validator(mode="after")
    def _stack_has(self) -> SharingConfig:
        spec = stacks()[self.provider.value].spec
        if self.cores is not None and spec.cores is None:
            raise ValueError(f"cores: {self.provider.value} has no per-slice compute resource; remove cores")
        if self.renamed and spec.renamed is None:
            raise ValueError(f"renamed: {self.provider.value} advertises no renamed resource; remove renamed")
        return self


class RdmaResource(Model):
    name: str
    count: int = Field(1, ge=1)

    @field_validator("name")
    @classmethod
    def _resource(cls, value: str) -> str:
        if not _RESOURCE_NAME.match(value):
            raise ValueError(f"{value!r} is not an extended resource name like 'rdma/rdma_shared_device_a'")
        return value


class RdmaConfig(Model):
    networks: tuple[str, ...] = Field(
        (), description="Multus networks, 'name', 'ns/name' or 'ns/name@ifname' (k8s.v1.cni.cncf.io/networks)"
    )
    resource: RdmaResource | None = None
    capabilities: tuple[str, ...] = ("IPC_LOCK",)
    shm_size: Quantity | None = Field("16Gi", description="memory-backed /dev/shm size; null to skip")
    env: dict[str, str] = Field(default_factory=dict, description="NCCL variables; never override the user's")

    @field_validator("networks")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            ref, _, ifname = entry.partition("@")
            parts = ref.split("/")
            if len(parts) > 2 or not all(_DNS_LABEL.match(p) for p in parts) or len(ifname) > 15:
                raise ValueError(f"{entry!r} is not a Multus network reference like 'ns/name@net1'")
        return value


class DraTemplates(Model):
    """Names of the platform's ResourceClaimTemplates; ``{count}``, ``{profile}``, ``{memory}`` are filled in."""

    exclusive: str = "gpu-admission-gpu-{count}"
    mig: str = "gpu-admission-mig-{profile}"
    shared: str = "gpu-admission-mem-{memory}"

    @model_validator(mode="after")
    def _placeholders(self) -> DraTemplates:
        for field, placeholder in (("exclusive", "{count}"), ("mig", "{profile}"), ("shared", "{memory}")):
            value = getattr(self, field)
            if value.count(placeholder) != 1:
                raise ValueError(f"{field}: {value!r} must contain {placeholder} exactly once")
            sample = value.replace(placeholder, "1g-5gb")
            if not _DEVICE_CLASS_NAME.match(sample) or sample.startswith("*") or len(sample) > 200:
                raise ValueError(
                    f"{field}: {value!r} does not make a valid object name (lower case, digits, '-', '.')"
                )
        return self


class DraConfig(Model):
    """The pool serves GPUs through DRA: intent becomes a claim on the platform's template, not resources."""

    device_classes: dict[Isolation, DeviceClassName] = Field(
        default_factory=dict, description="isolation -> the DeviceClass the platform's templates use"
    )
    templates: DraTemplates = DraTemplates()
    memory_sizes: tuple[Quantity, ...] | None = Field(
        None, description="shared: the slice sizes offered (default: powers of two GiB and the whole card)"
    )
    claim_name: Name = Field("gpu", description="name of the pod's resource claim the webhook adds")
    serves: tuple[DeviceClassName, ...] = Field(
        (), description="further DeviceClasses the pool's nodes serve (a claim reaches only pools serving its class)"
    )


class Pool(Model):
    description: str = ""
    gpu_model: str
    gpus_per_node: int = Field(..., ge=1, le=64)
    nodes: int | None = Field(None, ge=1, description="node count, used by gang-unschedulable")
    node_selector: dict[LabelKey, str] = Field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    isolation: tuple[Isolation, ...] = Field(
        (Isolation.EXCLUSIVE,), description="what the pool serves: exclusive, mig, shared"
    )
    mig: MigConfig | None = None
    sharing: SharingConfig | None = None
    rdma: RdmaConfig | None = None
    topology: dict[TopologyLevel, LabelKey] = Field(
        default_factory=dict, description="packing level -> node label key"
    )
    adopt_as: str | None = Field(
        None, description="class given to raw GPU requests whose nodeSelector selects this pool"
    )
    dra: DraConfig | None = Field(None, description="serve GPUs through DRA resource claims")
    taints: tuple[Taint, ...] | None = Field(
        None, description="taints every node carries; default: the taints the pool's tolerations tolerate"
    )
    offers: tuple[str, ...] = Field(
        (), description="extended resources the nodes advertise beyond what the pool's stack implies"
    )
    allowed_device_taints: tuple[DeviceTaintKey, ...] = Field(
        (),
        description="device taint keys (DRA, KEP-5055) the pool's tenants may tolerate in their claims; "
        "'*' also allows a blanket toleration (empty key, Exists)",
    )
    nvlink_domain_nodes: int | None = Field(
        None,
        ge=1,
        alias="nvlinkDomainNodes",
        description="nodes one multi-node NVLink domain (clique) spans, e.g. 18 on a GB200 NVL72 rack: "
        "a ComputeDomain gang must fit in one",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Pool:
        if Isolation.MIG in self.isolation and self.mig is None:
            raise ValueError(
                "isolation lists 'mig' but the pool has no 'mig' section (strategy mixed|single)"
            )
        dra = self.dra.device_classes if self.dra is not None else {}
        if Isolation.SHARED in self.isolation and self.sharing is None and Isolation.SHARED not in dra:
            raise ValueError(
                "isolation lists 'shared' but the pool has no 'sharing' section (provider) "
                "and no dra.deviceClasses.shared"
            )
        for isolation in dra:
            if isolation not in self.isolation:
                raise ValueError(f"dra.deviceClasses names {isolation.value!r}, which isolation does not list")
        if not self.isolation:
            raise ValueError("isolation must list at least one of exclusive, mig, shared")
        return self


# --- classes -----------------------------------------------------------------------------------


class IsolationPolicy(Model):
    default: Isolation = Isolation.EXCLUSIVE
    allowed: tuple[Isolation, ...] | None = None

    @model_validator(mode="after")
    def _default_allowed(self) -> IsolationPolicy:
        if self.allowed is not None and self.default not in self.allowed:
            raise ValueError(
                f"default {self.default.value!r} is not in allowed {[a.value for a in self.allowed]}"
            )
        return self

    @property
    def permitted(self) -> tuple[Isolation, ...]:
        return self.allowed if self.allowed is not None else (self.default,)


class GangPolicy(Model):
    backend: GangBackend = GangBackend.NONE
    required: bool = Field(False, description="multi-pod workloads of this class must form a gang")
    all_or_nothing: bool = Field(True, description="deny partial gangs (minAvailable below the replicas)")
    scheduler_name: str | None = Field(
        None, description="default: 'volcano' for the volcano backend, 'kai-scheduler' for kai"
    )
    queue: str | None = Field(
        None,
        description="the backend's queue for this class's workloads (Volcano Queue, KAI queue, Kueue LocalQueue), "
        "written where each kind's integration reads it; a namespace rule's queue overrides it",
    )


def _topology(value: str) -> str:
    level, _, mode = value.partition(":")
    if level != "none" and level not in TopologyLevel.__members__.values():
        raise ValueError(f"{value!r}: level must be one of node, switch, rack, zone, none")
    if mode not in ("", "required"):
        raise ValueError(f"{value!r}: only ':required' may follow the level")
    return value


class WorkloadClass(Model):
    description: str = ""
    pools: tuple[str, ...] = Field(..., min_length=1, description="candidate pools in order of preference")
    isolation: IsolationPolicy = IsolationPolicy()
    max_gpus: int | None = Field(None, ge=1, alias="maxGPUs", description="GPUs per pod")
    max_gpu_memory: Quantity | None = Field(None, alias="maxGPUMemory", description="per device")
    default_gpu_memory: Quantity | None = Field(
        None, alias="defaultGPUMemory", description="used when the intent has no gpu-memory"
    )
    gang: GangPolicy = GangPolicy()
    rdma: bool = False
    topology: Annotated[str, AfterValidator(_topology)] = "none"
    priority_class_name: str | None = None
    scheduler_name: str | None = None
    allowed_priority_classes: tuple[str, ...] = Field(
        (), description="priority classes a user may set besides the class's own priorityClassName"
    )
    allowed_schedulers: tuple[str, ...] = Field(
        (), description="schedulers a user may name besides default-scheduler and the ones the class sets"
    )
    qos: QoS = QoS.ANY
    kueue_queue: str | None = None
    allowed_device_taints: tuple[DeviceTaintKey, ...] = Field(
        (),
        description="device taint keys (DRA, KEP-5055) this class's pods may tolerate in their claims; "
        "'*' also allows a blanket toleration",
    )


# --- priority classes -------------------------------------------------------------------------


class PriorityClassSpec(Model):
    """A PriorityClass the policy's classes name; ``gpu-admission policy render`` creates it.

    Without it the API server's Priority admission plugin rejects every pod the webhook gives that
    ``priorityClassName``, so the policy that names it is also the place that defines it.
    """

    value: int = Field(..., ge=-2147483648, le=1000000000, description="scheduling priority (higher first)")
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = Field(
        "PreemptLowerPriority", description="Never: waits for room instead of evicting lower-priority pods"
    )
    description: str = ""


# --- namespaces --------------------------------------------------------------------------------


class SelectorRequirement(Model):
    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _values(self) -> SelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(Model):
    match_labels: dict[LabelKey, str] = Field(default_factory=dict)
    match_expressions: tuple[SelectorRequirement, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "In" and (not present or labels[req.key] not in req.values):
                return False
            if req.operator == "NotIn" and present and labels[req.key] in req.values:
                return False
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
        return True


class Entitlement(Model):
    name: str = ""
    selector: LabelSelector = LabelSelector()
    classes: tuple[str, ...] = ()
    pools: tuple[str, ...] | None = Field(None, description="restricts the classes' pools; default: all")
    kueue_queue: str | None = None
    queue: str | None = Field(
        None, description="the gang backend's queue for these namespaces' workloads (overrides the class's gang.queue)"
    )
    allowed_priority_classes: tuple[str, ...] = Field(
        (), description="priority classes a raw GPU request (no workload class) of these namespaces may set"
    )
    allowed_schedulers: tuple[str, ...] = Field(
        (), description="schedulers other than default-scheduler a raw GPU request of these namespaces may name"
    )
    default_isolation: dict[str, Isolation] = Field(
        default_factory=dict,
        description="class -> the isolation these namespaces' pods of that class get when they name none (instead "
        "of the class's default, e.g. shared where the rule's pools serve no MIG); one the class allows",
    )


# --- rules -------------------------------------------------------------------------------------


def _yaml_off(value: object) -> object:
    """YAML 1.1 reads an unquoted ``off`` as false: accept what the platform engineer meant."""
    return "off" if value is False else value


RuleAction = Annotated[Action, BeforeValidator(_yaml_off)]


class NamespaceAction(Model):
    selector: LabelSelector
    action: RuleAction


class RuleSettings(Model):
    action: RuleAction | None = None
    classes: dict[str, RuleAction] = Field(default_factory=dict)
    namespaces: tuple[NamespaceAction, ...] = ()
    exempt: tuple[LabelSelector, ...] = ()


# --- exceptions (SPEC §14) -------------------------------------------------------------------------


class SubjectKind(StrEnum):
    USER = "User"
    GROUP = "Group"
    SERVICE_ACCOUNT = "ServiceAccount"


SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


class Subject(Model):
    """Who an exception is for, spelled as an RBAC subject: a User or Group by name, a ServiceAccount by
    namespace and name (matched as the username ``system:serviceaccount:<namespace>:<name>``, which is
    how the apiserver names a service account's requests in ``userInfo``)."""

    kind: SubjectKind = Field(description="User, Group or ServiceAccount")
    name: str = Field(min_length=1, max_length=253, description="the user, group or service account name")
    namespace: str | None = Field(None, description="ServiceAccount only: the service account's namespace")

    @model_validator(mode="after")
    def _namespace(self) -> Subject:
        if self.kind is SubjectKind.SERVICE_ACCOUNT and not self.namespace:
            raise ValueError(f"ServiceAccount subject {self.name!r} needs a namespace (as in an RBAC binding)")
        if self.kind is not SubjectKind.SERVICE_ACCOUNT and self.namespace is not None:
            raise ValueError(f"{self.kind.value} subjects are cluster-wide: remove namespace from {self.name!r}")
        return self

    @property
    def ref(self) -> str:
        """``User:alice``, ``Group:ci``, ``ServiceAccount:ns:name``: how a grant records who it was issued to."""
        if self.kind is SubjectKind.SERVICE_ACCOUNT:
            return f"{self.kind.value}:{self.namespace}:{self.name}"
        return f"{self.kind.value}:{self.name}"

    def matches(self, username: str, groups: tuple[str, ...]) -> bool:
        if self.kind is SubjectKind.USER:
            return username == self.name
        if self.kind is SubjectKind.GROUP:
            return self.name in groups
        return username == f"{SERVICE_ACCOUNT_PREFIX}{self.namespace}:{self.name}"


class PolicyException(Model):
    """Let the named subjects break the named rules in the selected namespaces until ``expires``.

    A finding an exception covers is admitted and reported as an ``audit`` entry naming it, never
    dropped. ``kinds``/``names`` narrow it to some objects: for a pod created by a controller they are
    matched against the controller the exception was granted at (docs/policy.md "Exceptions")."""

    name: Name = Field(description="unique across the policy files: audit entries, metrics and grants name it")
    rules: tuple[str, ...] = Field((), description="rule ids the exception lets the subjects break")
    namespaces: LabelSelector = Field(description="namespaces it applies in (a label selector; {} = every namespace)")
    kinds: tuple[str, ...] = Field((), description="object kinds it applies to (Deployment, Job, Pod…); default: all")
    names: tuple[str, ...] = Field((), description="object names it applies to; default: all")
    subjects: tuple[Subject, ...] = Field((), description="who may use it (RBAC-style User, Group, ServiceAccount)")
    expires: date = Field(description="the day it stops applying (YYYY-MM-DD, UTC)")
    reason: str = Field(min_length=1, description="why, for the record (audit entries and reports quote the name)")
    owner: str = Field(min_length=1, description="who answers for it (a team, a person, a ticket)")

    def active(self, today: date) -> bool:
        """Applies up to the day before ``expires``: on that day (UTC) it has stopped."""
        return today < self.expires


DEFAULT_CONTROLLERS: tuple[str, ...] = (
    *(
        f"{SERVICE_ACCOUNT_PREFIX}kube-system:{name}"
        for name in (
            "replicaset-controller",
            "deployment-controller",
            "job-controller",
            "cronjob-controller",
            "statefulset-controller",
            "daemon-set-controller",
        )
    ),
    "system:kube-controller-manager",  # a controller manager run without --use-service-account-credentials
)
"""Who creates the built-in kinds' pods and child objects (kube-controller-manager, one service account per
controller with ``--use-service-account-credentials``, the kubeadm default)."""


def _kube_version(value: object) -> object:
    """``X.Y`` as a string: YAML reads an unquoted 1.30 as the number 1.3, which names another version."""
    if isinstance(value, float | int) and not isinstance(value, bool):
        raise ValueError(f"{value!r} is a number: quote the version (kubeVersion: \"1.36\"); YAML reads 1.30 as 1.3")
    return value


KUBE_VERSION_PATTERN = r"^v?[0-9]{1,3}\.[0-9]{1,3}$"
KubeVersion = Annotated[str, BeforeValidator(_kube_version), Field(pattern=KUBE_VERSION_PATTERN)]


class InTreeSettings(Model):
    """How ``policy render --in-tree`` and the webhook configurations are rendered for the in-tree
    guarantees (SPEC §12): kept in the policy so the cluster's choice is on record beside the policy and
    every render (CI included) gives the same objects; the flags of the same names override it."""

    kube_version: KubeVersion | None = Field(
        None,
        description="the cluster's Kubernetes version as \"X.Y\": from 1.36 the in-tree render also emits "
        "MutatingAdmissionPolicies (default 1.30; flag --kube-version)",
    )
    mutating: bool = Field(
        True,
        description="emit MutatingAdmissionPolicies where the cluster serves them (kubeVersion 1.36 or later); "
        "false: ValidatingAdmissionPolicies only (flags --mutating/--no-mutating)",
    )
    availability: Literal["webhook", "in-tree"] = Field(
        "webhook",
        description="webhook: the validating webhook fails closed; in-tree: it fails open, for clusters with the "
        "in-tree policies installed (flag --availability)",
    )


class Settings(Model):
    prefix: Annotated[str, AfterValidator(lambda v: _label_key(v + "/x") and v)] = "gpu-admission.io"
    waste_fraction: float = Field(0.5, gt=0, le=1, description="whole-gpu-waste threshold")
    failure: Literal["allow", "deny"] = Field(
        "allow",
        description="what /mutate does when the engine raises: admit without a patch (logged) or deny; "
        "/validate denies such an object either way (engine-error)",
    )
    raw_requests: Literal["pin", "deny"] = Field(
        "pin",
        description="raw GPU requests (no workload class): pin onto an entitled pool, or deny those that can "
        "reach a pool outside the entitlement",
    )
    privileged_gpu_pools: Literal["sliced", "all"] = Field(
        "sliced",
        alias="privilegedGPUPools",
        description="privileged-gpu judges pods that can reach pools of shared/sliced cards, or every GPU pool",
    )
    platform_group: str = Field(
        "gpu-admission:platform",
        min_length=1,
        max_length=253,
        description="the group whose members may set, change or remove the namespace labels the policy selects on",
    )
    controllers: tuple[str, ...] = Field(
        default=DEFAULT_CONTROLLERS,
        description="usernames of the controllers that create objects from a pod template (kube-controller-manager's "
        "service accounts, operators'): an exception grant on an object is honoured only when one of them creates it",
    )
    gpu_resource_prefixes: tuple[str, ...] = Field(
        alias="gpuResourcePrefixes",
        default=(
            "nvidia.com/gpu",
            "nvidia.com/mig-",
            "aliyun.com/gpu",
            "volcano.sh/vgpu-",
            "volcano.sh/gpu-",
            "tke.cloud.tencent.com/qgpu",
        ),
        description="extended resources that count as GPUs (prefix match); every sharing stack's resources count too",
    )
    gpu_fraction_annotations: tuple[str, ...] = Field(
        alias="gpuFractionAnnotations",
        default=("gpu-fraction", "gpu-memory"),
        description="pod annotations a scheduler reads as a share of one GPU (KAI's gpu-fraction and gpu-memory): "
        "a pod that carries one holds a shared GPU, though it lists no GPU resource",
    )
    enforcement: Enforcement = Field(
        Enforcement.ENFORCE,
        description="what a deny does, policy-wide, without editing a rule: enforce (denied), warn (admitted with "
        "an admission warning saying it would be denied) or audit (admitted; audit annotation, log line and "
        "metric only): the observe-first rollout (docs/install.md)",
    )
    mutation: Annotated[Literal["apply", "off"], BeforeValidator(_yaml_off)] = Field(
        "apply",
        description="apply: /mutate places class pods and raw requests; off: /mutate returns no patch (and "
        "observe-mode /validate judges a CREATE as the patch would have left it)",
    )
    in_tree: InTreeSettings = Field(
        default_factory=InTreeSettings,
        description="the in-tree guarantees' render: kubeVersion, mutating, availability",
    )


class PolicySpec(Model):
    settings: Settings | None = None
    gpu_models: dict[str, GPUModel] = Field(default_factory=dict, alias="gpuModels")
    device_classes: dict[DeviceClassName, DeviceClass] = Field(default_factory=dict, alias="deviceClasses")
    device_taints: dict[LabelKey, DeviceTaintSpec] = Field(
        default_factory=dict,
        alias="deviceTaints",
        description="device taints (DRA, KEP-5055) beyond the built-in NVIDIA health taints, by key: what "
        "tolerating each means",
    )
    pools: dict[Name, Pool] = Field(default_factory=dict)
    classes: dict[Name, WorkloadClass] = Field(default_factory=dict)
    namespaces: tuple[Entitlement, ...] = ()
    rules: dict[str, RuleSettings] = Field(default_factory=dict)
    priority_classes: dict[Name, PriorityClassSpec] = Field(
        default_factory=dict, description="PriorityClasses `policy render` creates for the classes that name them"
    )
    exceptions: tuple[PolicyException, ...] = Field(
        (),
        description="named, expiring permissions for a subject to break a rule (SPEC §14; docs/policy.md Exceptions)",
    )
    workload_kinds: tuple[WorkloadKindSpec, ...] = Field(
        (),
        alias="workloadKinds",
        description="the platform's own workload CRDs, described like the built-in kinds (template paths, "
        "replica fields, gang keys per backend)",
    )


class Metadata(Model):
    name: str = ""
    annotations: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)


class PolicyDocument(Model):
    """One YAML document of the policy directory."""

    api_version: Literal["gpu-admission.io/v1"]
    kind: Literal["GPUPolicy"]
    metadata: Metadata = Metadata()
    spec: PolicySpec


def mig_profile_memory_gib(profile: str) -> int:
    """``3g.40gb+me`` -> 40: the number in the name (nominal; the catalog's ``memory`` is what is usable)."""
    match = _MIG_PROFILE.match(profile)
    if not match:
        raise ValueError(profile)
    return int(match.group(2))


def mig_profile_slices(profile: str) -> int:
    match = _MIG_PROFILE.match(profile)
    if not match:
        raise ValueError(profile)
    return int(match.group(1))


def mig_resource_name(profile: str) -> str:
    """The device plugin's name for a profile (v0.20+): ``+`` becomes ``.``."""
    return "nvidia.com/mig-" + profile.replace("+", ".")
