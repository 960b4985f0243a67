"""State shared by the mutation steps and the rules for one evaluation (never across requests)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook.engine.model import reach
from webhook.engine.model.claims import EXTENDED_RESOURCE_CLAIM, UNRESOLVED, ClaimRequest, ClaimResolver
from webhook.engine.model.cluster import EMPTY_CLUSTER, Cluster
from webhook.engine.model.device_reach import has_trigger, may_reach_a_pool
from webhook.engine.model.devices import PodResources, inspect_pod
from webhook.engine.model.exceptions import NONE as NO_EXCEPTIONS
from webhook.engine.model.exceptions import Holding
from webhook.engine.model.intent import Intent
from webhook.engine.model.requester import Requester
from webhook.engine.model.resolution import Failure, Resolution
from webhook.engine.model.workload import Template
from webhook.policy.compiled import Policy
from webhook.policy.kinds import CompiledKind
from webhook.policy.model import Entitlement, GangBackend, WorkloadClass


@dataclass(slots=True)
class Finding:
    """A rule's raw result before the policy decides its action."""

    rule: str
    path: str
    message: str
    class_name: str | None = None


@dataclass(slots=True)
class TemplateState:
    tpl: Template
    intent: Intent | None
    policy: Policy
    resolution: Resolution | None = None
    failure: Failure | None = None
    targeted_pools: tuple[str, ...] = ()  # pools the user's own nodeSelector selects
    after_tpl: Template | None = None  # the template in the mutated object (what rules judge)
    after: PodResources | None = None
    claims: ClaimResolver | None = None  # resolves the template's DRA claims (webhook.engine.model.claims)
    pinned: str | None = None  # the pool a raw request was (or, as received, would be) pinned to
    device_env: bool = True  # privileged-gpu is not off for this template: ungranted containers get void
    _resources: PodResources | None = None
    _reach: frozenset[str] | None = None
    _trigger: bool | None = None
    _received_reach: frozenset[str] | None = None

    @property
    def trigger(self) -> bool:
        """A container of the template as received has a way past the device grant (``has_trigger``);
        derived once, since both relevance tests ask."""
        if self._trigger is None:
            self._trigger = has_trigger(self.tpl.spec)
        return self._trigger

    def received_reach(self, cluster: Cluster) -> frozenset[str]:
        """Pools the template as received can be bound into (``reach`` judges it as it will be)."""
        if self._received_reach is None:
            self._received_reach = reach.reachable(
                self.policy, reach.placement(self.tpl.spec, self.resources), cluster.nodes
            )
        return self._received_reach

    @property
    def resources(self) -> PodResources:
        """What the template as received asks of devices. Read on first use: a ``/mutate`` of a
        template that declares its intent never needs it (the rules, which do, run on ``/validate``)."""
        if self._resources is None:
            self._resources = self.inspect(self.tpl)
        return self._resources

    def inspect(self, tpl: Template) -> PodResources:
        """What ``tpl`` (this template as received, or as our mutation leaves it) asks of devices."""
        policy = self.policy
        return inspect_pod(
            tpl.spec,
            gpu_prefixes=policy.gpu_prefixes,
            rdma=policy.rdma_resources,
            claims=self.claims,
            annotations=tpl.metadata.get("annotations"),
            fraction_keys=policy.fraction_keys,
        )

    @property
    def view(self) -> Template:
        return self.after_tpl if self.after_tpl is not None else self.tpl

    @property
    def judged(self) -> PodResources:
        return self.after if self.after is not None else self.resources

    @property
    def class_name(self) -> str | None:
        return self.intent.class_name if self.intent is not None else None

    @property
    def cls(self) -> WorkloadClass | None:
        return self.resolution.cls if self.resolution is not None else None

    def target(self) -> tuple[str, int] | None:
        """(group, index) of the container that gets the GPUs: the named one, else the first. Always
        one of ``spec.containers`` (the intent refuses an init or ephemeral container's name)."""
        items = self.tpl.spec.get("containers")
        if not isinstance(items, list):
            return None
        name = self.intent.container if self.intent is not None else None
        for index, container in enumerate(items):
            if isinstance(container, dict) and (name is None or container.get("name") == name):
                return "containers", index
        return None


@dataclass(slots=True)
class Gang:
    """The workload's gang as the engine derived it (backend, size, carrier)."""

    backend: GangBackend
    name: str | None
    size: int
    selector: dict[str, str] | None  # labels that select the gang's own pods (for topology)
    start: int | None = None
    """Pods that exist when the gang must form, if fewer than ``size``: a Volcano Job whose tasks have
    ``dependsOn`` creates the dependent tasks' pods only after the others run, so its gang
    (``minAvailable``) can count only the tasks without ``dependsOn``."""

    @property
    def min_member(self) -> int:
        """What the backend's gang minimum must be for the gang to form and start whole."""
        return self.size if self.start is None else self.start


_UNSET = object()


@dataclass(slots=True)
class Context:
    policy: Policy
    obj: dict[str, Any]
    kind: str  # the kind's display name ("Pod", "VolcanoJob"), for messages; its traits are in ``workload``
    workload: CompiledKind  # the kind table's row: templates, pod count, gang keys per backend
    operation: str
    namespace: str
    namespace_labels: dict[str, str]
    entitlement: Entitlement | None
    old_object: dict[str, Any] | None
    states: list[TemplateState]
    findings: list[Finding] = field(default_factory=list)
    trace: list[str] | None = None
    gang: Gang | None = None
    mutated: dict[str, Any] | None = None
    cluster: Cluster = EMPTY_CLUSTER
    excepted: Holding = NO_EXCEPTIONS
    """Rules a policy exception covers in this evaluation (:func:`webhook.engine.model.exceptions.holding`)."""
    stored: bool = False
    """The rules judge the object as the apiserver will store it (``/validate`` of a CREATE we mutate):
    what our mutation should have set must already be there (``placement-missing``)."""
    env_fixed: bool = False
    """A Pod's UPDATE: its containers' env can no longer change (the apiserver forbids it, nothing
    re-mutates an UPDATE), so a container without ``NVIDIA_VISIBLE_DEVICES`` in a pod that can now reach
    a GPU pool keeps the image's value: ``privileged-gpu`` says to re-create the pod."""
    requester: Requester | None = None
    """Who sent the request (``request.userInfo``); None offline."""
    entitlement_key: int | None = None
    """The entitlement's place among the policy's namespace rules (None: none matched): a value of the
    frozen policy, so what is remembered per entitlement is keyed by it (an entitlement, a pydantic
    model holding selectors, is not hashable)."""
    _primary: object = _UNSET  # the primary once resolved() says the resolutions are final

    def reach(self, state: TemplateState) -> frozenset[str]:
        """Pools the template as judged (``view``/``judged``) can be bound into: ``webhook.engine.model.reach``."""
        if state._reach is None:
            state._reach = reach.reachable(
                self.policy, reach.placement(state.view.spec, state.judged), self.cluster.nodes
            )
        return state._reach

    def reaches_gpu_pool(self, state: TemplateState) -> bool:
        """The template's pods can run on a GPU pool's nodes: it holds GPUs or declares a class (it is
        placed on one), or the reachability model finds a pool it can be bound into. A class template
        that did not resolve is denied and placed nowhere: nothing to say about its device env."""
        if state.intent is not None:
            return state.resolution is not None
        if state.judged.has_gpu:
            return True
        return may_reach_a_pool(self.policy, state.view.spec) and bool(self.reach(state))

    def explain(self, line: str) -> None:
        if self.trace is not None:
            self.trace.append(line)

    @property
    def name(self) -> str:
        meta = self.obj.get("metadata")
        if isinstance(meta, dict):
            name = meta.get("name") or meta.get("generateName") or ""
            return str(name)
        return ""

    @property
    def primary(self) -> TemplateState | None:
        """The template whose class speaks for the workload (gang, topology): the first resolved one.
        Once the templates are resolved (``resolved()``) it is derived once; the rules and steps ask
        for it a dozen times per object."""
        if self._primary is not _UNSET:
            return self._primary  # type: ignore[return-value]
        return next((state for state in self.states if state.resolution is not None), None)

    def resolved(self) -> None:
        """Every template's resolution is final: ``primary`` may now be remembered."""
        self._primary = next((state for state in self.states if state.resolution is not None), None)


@dataclass(frozen=True, slots=True)
class ClaimObject:
    """A ResourceClaim or ResourceClaimTemplate admitted on its own, normalised for the rules.

    ``spec_at`` is where its ResourceClaimSpec sits (``spec``; a template's ``spec.spec``), so a rule
    names the field it judges; ``marker_at`` the annotations the claim will carry (a template's
    ``spec.metadata`` is copied into the claims made from it)."""

    kind: str
    name: str
    spec_at: str
    requests: tuple[ClaimRequest, ...]
    annotations: dict[str, Any]
    marker_at: str

    @property
    def judged(self) -> bool:
        """Something here for the claim rules: the scheduler's marker, or a request that may allocate GPUs
        (its count, ``All``, ``adminAccess``, classes, tolerations and capacity are what a pod that names
        the object is judged for). Any other claim (a NIC, an IMEX channel) is left alone (not relevant)."""
        return EXTENDED_RESOURCE_CLAIM in self.annotations or any(
            r.tolerations or r.capacity or r.admin or r.families - {UNRESOLVED} for r in self.requests
        )


@dataclass(slots=True)
class ClaimContext:
    """What the rules that judge claim objects see (the pod rules' :class:`Context` has templates)."""

    policy: Policy
    obj: dict[str, Any]
    claim: ClaimObject
    operation: str
    namespace: str
    namespace_labels: dict[str, str]
    entitlement: Entitlement | None
    requester: Requester | None = None
    cluster: Cluster = EMPTY_CLUSTER
    trace: list[str] | None = None

    def explain(self, line: str) -> None:
        if self.trace is not None:
            self.trace.append(line)
