"""The judgement of one stored object: a plain function of (policy, object, cluster view).

It calls the engine and nothing else, keeps no state and returns a small picklable record, so a
process pool can call it for a page of objects as well as this loop does. What is judged is the
object as the validating webhook saw it at CREATE (:func:`webhook.audit.stored.as_admitted`), with
``Stage.STORED``: nothing is mutated, and a Pod or Job of a class that was stored without our
mutation (created while the webhook was down or not yet installed) is ``placement-missing``.
Controllers are judged as their pods will be, as admission judges them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any

from webhook.audit.stored import as_admitted, controller_of, metadata
from webhook.check.context import CONTEXT_KINDS
from webhook.check.runner import Status, engine_failure, verdict
from webhook.engine import Request, Stage, Violation, mutate, report, validate
from webhook.engine.claim_object import is_claim_object
from webhook.engine.model.cluster import Cluster
from webhook.engine.model.grants import Grant, GrantKeys, controlling_owner
from webhook.engine.model.requester import Requester
from webhook.engine.model.workload import classify
from webhook.policy.compiled import Policy

if TYPE_CHECKING:
    from webhook.audit.baseline import Change


NOT_GPU = "not-gpu"  # neither intent nor GPU resources: nothing the webhook judges
NOT_INTERCEPTED = "not-intercepted"  # in a namespace the webhook configurations exclude
MIRROR_POD = "mirror-pod"  # a static pod's mirror, written by the kubelet
REQUESTER_RULES = frozenset({"scheduler-claim-forged"})  # judged on who sends the object: not auditable
CLUSTER_CONTEXT = "cluster-context"  # Namespaces, Nodes, DRA objects: read as the cluster's context, not workloads


@dataclass(slots=True)
class Judged:
    """One object's verdict with what reports need to name it; ``status`` is SKIPPED when the object
    is not GPU-relevant (such records are counted, never listed)."""

    api_version: str
    kind: str
    namespace: str  # "" for a cluster-scoped object
    name: str
    uid: str
    status: Status
    violations: tuple[Violation, ...] = ()
    owner: str = ""  # "ReplicaSet/web-5d8f" or "Deployment/web (via ReplicaSet/web-5d8f)"
    message: str = ""  # why an object could not be judged
    patch: tuple[str, ...] | None = None  # the CREATE mutation, as compact JSON ops (--baseline only)
    placements: tuple[str, ...] = ()  # "template: pool P, class C, resources …" (--baseline only)
    skip: str = ""  # why a SKIPPED object was not judged: not-gpu, not-intercepted, mirror-pod
    change: Change | None = None  # --baseline: the verdict under the old policy and what changed
    owner_ref: tuple[str, str, str, str] | None = None  # (group, kind, name, uid) of the controlling owner
    carried: tuple[Grant, ...] = ()  # grants honoured as a controller's: believed once the chain is verified
    ungranted: tuple[Status, tuple[Violation, ...]] | None = None  # the verdict if ``carried`` is not believed

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.name}"

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.label}" if self.namespace else self.label


def identity(obj: dict[str, Any]) -> tuple[str, str, str, str, str]:
    """(apiVersion, kind, namespace, name, uid) of a stored object."""
    meta = metadata(obj)
    return (
        str(obj.get("apiVersion") or ""),
        str(obj.get("kind") or ""),
        str(meta.get("namespace") or ""),
        str(meta.get("name") or meta.get("generateName") or ""),
        str(meta.get("uid") or ""),
    )


def judge(
    policy: Policy,
    obj: dict[str, Any],
    *,
    cluster: Cluster,
    namespace_labels: dict[str, str] | None,
    mutation: bool = False,
    today: date | None = None,
    grant_keys: GrantKeys | None = None,
) -> Judged:
    """The validating judgement of ``obj`` as stored; with ``mutation``, also what the mutating webhook
    would change in it now and where its templates land (for ``--baseline``'s "mutated differently").
    ``today`` and ``grant_keys``: the policy's exceptions apply as on that day, grants verified with those
    keys (``webhook.audit.exceptions``); without ``today`` none applies."""
    api_version, kind, namespace, name, uid = identity(obj)
    owner = controller_of(obj)
    out = Judged(
        api_version, kind, namespace, name, uid, Status.SKIPPED, owner=f"{owner[0]}/{owner[1]}" if owner else "",
        skip=NOT_GPU, owner_ref=controlling_owner(metadata(obj)),
    )
    claim = is_claim_object(obj)
    if not claim and classify(obj, policy) is None:
        if kind in CONTEXT_KINDS:  # a Namespace, a Node, a DRA object: the cluster's context, not a workload
            out.skip = CLUSTER_CONTEXT
        return out
    admitted = as_admitted(obj)
    try:
        stored = _create(
            admitted, namespace, namespace_labels, cluster, stage=Stage.STORED, today=today, grant_keys=grant_keys,
            requester=requester_of(policy, owner) if today else None,
        )
        # with --baseline, the placements too (what report adds to the verdict); else the verdict alone
        decision = report(policy, stored) if mutation else validate(policy, stored)
        if not decision.relevant:
            return out
        if claim:  # who wrote a stored claim's marker is not in the object (/validate checked the requester)
            decision.violations = tuple(v for v in decision.violations if v.rule not in REQUESTER_RULES)
        out.skip = ""
        out.status = verdict(decision, enforced=True)  # what the rules deny, whatever the rollout mode
        out.violations = decision.violations
        if decision.carried_grants:  # believed only through an owner chain the audit verifies (webhook.audit.owners)
            out.carried = tuple(decision.carried_grants)
            plain = validate(policy, stored._replace(grant_keys=None))
            out.ungranted = (verdict(plain), plain.violations)
        if mutation:
            out.placements = tuple(
                f"{p.template or 'pod'}: class {p.class_name}, pool {p.pool}, "
                + ", ".join(f"{k}={v}" for k, v in sorted(p.resources.items()))
                for p in decision.placements
            )
            out.patch = _mutation(policy, admitted, namespace, namespace_labels, cluster)
    except Exception as exc:  # an engine bug must not hide the rest of the cluster
        out.status, out.skip, out.message = Status.ENGINE_ERROR, "", engine_failure(exc)
    return out


def requester_of(policy: Policy, owner: tuple[str, str] | None) -> Requester | None:
    """Who sent a stored object, as far as the object says: its controller when it has a controlling owner
    (``settings.controllers``' first entry stands for it: a grant carried from the owner is honoured only
    for a controller), else unknown (no subject matches; only a grant bound to the object itself applies).
    ``/validate`` checked the real requester when the object was admitted; the audit cannot."""
    if owner is None or not policy.settings.controllers:
        return None
    return Requester(policy.settings.controllers[0])


def _create(
    obj: dict[str, Any], namespace: str, labels: dict[str, str] | None, cluster: Cluster, **fields: Any
) -> Request:
    """``obj`` as a CREATE in its namespace (``fields``: the rest of the request)."""
    return Request(
        obj, operation="CREATE", namespace=namespace or None, namespace_labels=labels, cluster=cluster, **fields
    )


def _mutation(
    policy: Policy, obj: dict[str, Any], namespace: str, labels: dict[str, str] | None, cluster: Cluster
) -> tuple[str, ...]:
    """The patch ``/mutate`` would answer for this object if it were created now (empty for kinds the
    webhook only validates, and for an object our mutation already shaped)."""
    import orjson

    decision = mutate(policy, _create(obj, namespace, labels, cluster))
    return tuple(orjson.dumps(op, option=orjson.OPT_SORT_KEYS).decode() for op in decision.patch)
