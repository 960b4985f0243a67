"""ResourceClaims and ResourceClaimTemplates judged on their own, at their CREATE and UPDATE.

A pod's claims are judged with the pod (``webhook.engine.model.claims``), but some of what a claim says must
be judged where it is written, by whom it is written:

- the scheduler's extended-resource-claim marker (KEP-5004) tells quota the claim was already counted
  through the pod; only the scheduler may write it (a user's marked claims escape quota,
  kubernetes/kubernetes#135404), so the requester is judged, on claims and on templates (whose
  ``spec.metadata`` is copied into every claim made from them);
- device-taint tolerations (KEP-5055) and capacity requests (KEP-5075) of the requests that may
  allocate GPUs: the same rules as for pods, so a template is stopped before any pod names it.

The object is normalised first (:class:`~webhook.engine.model.context.ClaimObject`, through the same
:class:`~webhook.engine.model.claims.ClaimResolver` pods use), then every rule that judges claim objects runs.
"""

from __future__ import annotations

from typing import Any

from webhook.engine.model.claims import ClaimResolver
from webhook.engine.model.cluster import Cluster
from webhook.engine.model.context import ClaimContext, ClaimObject
from webhook.engine.model.decision import Action, Decision, Violation
from webhook.engine.model.requester import Requester
from webhook.engine.rules import RULES, effective_action, violation
from webhook.engine.rules.registry import CLAIM
from webhook.policy.compiled import Policy

GROUP = "resource.k8s.io"
KINDS = {
    "ResourceClaim": ("spec", "metadata.annotations"),
    "ResourceClaimTemplate": ("spec.spec", "spec.metadata.annotations"),
}
"""kind -> (where its ResourceClaimSpec is, where the annotations its claims carry are)."""


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _at(obj: dict[str, Any], dotted: str) -> dict[str, Any]:
    node: Any = obj
    for part in dotted.split("."):
        node = _map(node).get(part)
    return _map(node)


def is_claim_object(obj: Any) -> bool:
    """A ResourceClaim or ResourceClaimTemplate of any served version (v1, v1beta1, v1beta2)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("apiVersion"), str):
        return False
    return obj["apiVersion"].rpartition("/")[0] == GROUP and obj.get("kind") in KINDS


def normalise(obj: dict[str, Any], resolver: ClaimResolver) -> ClaimObject:
    kind = str(obj["kind"])
    spec_at, marker_at = KINDS[kind]
    meta = _map(obj.get("metadata"))
    return ClaimObject(
        kind=kind,
        name=str(meta.get("name") or meta.get("generateName") or ""),
        spec_at=spec_at,
        requests=resolver.requests(_at(obj, spec_at)),
        annotations=_at(obj, marker_at),
        marker_at=marker_at,
    )


def decide(
    policy: Policy,
    obj: dict[str, Any],
    *,
    operation: str,
    namespace: str,
    namespace_labels: dict[str, str],
    old_object: dict[str, Any] | None,
    requester: Requester | None,
    cluster: Cluster,
    trace: list[str] | None,
) -> Decision:
    """The decision for one claim object. Relevant when it has something the rules judge (the marker;
    tolerations or capacity requests of a request that may allocate GPUs), as the webhook's
    matchConditions forward it; on UPDATE only what the update introduces is reported, as for workloads."""
    claim = normalise(obj, ClaimResolver(policy, cluster, namespace))
    kind, name = claim.kind, claim.name
    if not claim.judged:
        return Decision(kind=kind, name=name, operation=operation, relevant=False)
    ctx = ClaimContext(
        policy=policy,
        obj=obj,
        claim=claim,
        operation=operation,
        namespace=namespace,
        namespace_labels=namespace_labels,
        # a namespace the edge could not find has no entitlement (never the catch-all's)
        entitlement=None if namespace in cluster.unknown_namespaces else policy.entitlement(namespace_labels),
        requester=requester,
        cluster=cluster,
        trace=trace,
    )
    out: list[Violation] = []
    for rule in RULES.values():
        if CLAIM not in rule.subjects:
            continue
        for finding in rule.check(ctx):
            action = effective_action(policy, finding.rule, namespace_labels, None)
            ctx.explain(f"rule {finding.rule}: {action.value}: {finding.message}")
            if action is not Action.OFF:
                out.append(violation(policy, finding.rule, action, finding.path, finding.message))
    violations = tuple(dict.fromkeys(out))
    if violations and operation == "UPDATE" and is_claim_object(old_object):
        before = decide(
            policy,
            old_object,  # type: ignore[arg-type]
            operation="UPDATE",
            namespace=namespace,
            namespace_labels=namespace_labels,
            old_object=None,
            requester=requester,
            cluster=cluster,
            trace=None,
        )
        known = {(v.rule, v.path, v.message) for v in before.violations}
        violations = tuple(v for v in violations if (v.rule, v.path, v.message) not in known)
    return Decision(
        kind=kind,
        name=name,
        operation=operation,
        violations=violations,
        explanation=tuple(trace or ()),
        mutated=obj,
        relevant=True,
    )
