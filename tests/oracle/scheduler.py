"""kube-scheduler's filters, modelled from Kubernetes' source, over plain Pod and Node dicts.

Written independently of the engine (nothing here imports ``webhook``): a second opinion on where a
pod can be bound. Checked against the real kube-scheduler 1.36 in the end-to-end tier
(``tests/e2e/test_scheduler.py``): pods drawn by the oracle's own strategies are bound by kube-scheduler
exactly when this model says some node can take them, and only to a node it allows. Upstream sources
followed (kubernetes/kubernetes, master as of 2026):

- NodeAffinity: ``staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go``
  (``GetRequiredNodeAffinity``, ``RequiredNodeAffinity.Match``, ``LazyErrorNodeSelector.Match``,
  ``nodeSelectorRequirementsAsSelector``, ``nodeSelectorRequirementsAsFieldSelector``): the pod's
  ``nodeSelector`` must match the node's labels exactly (``labels.SelectorFromSet``), AND the required
  ``nodeSelectorTerms`` are ORed; a term with neither ``matchExpressions`` nor ``matchFields`` is
  skipped (it matches no node); inside a term every expression is ANDed (``labels.Requirement.Matches``
  of ``k8s.io/apimachinery/pkg/labels/selector.go``: ``In``/``NotIn``/``Exists``/``DoesNotExist``/
  ``Gt``/``Lt``, ``NotIn`` and ``DoesNotExist`` match a node without the label, ``Gt``/``Lt`` need the
  label to parse as an int64); ``matchFields`` knows only ``metadata.name`` with ``In``/``NotIn`` and
  exactly one value. Preferred terms only score, they never filter.
- TaintToleration: ``staging/src/k8s.io/api/core/v1/toleration.go`` (``Toleration.ToleratesTaint``) and
  ``pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go`` (``Filter``: only taints with
  effect ``NoSchedule`` or ``NoExecute`` filter; ``PreferNoSchedule`` only scores). An empty toleration
  effect matches every effect, an empty key matches every key (the API server requires ``Exists``
  then), an empty operator is ``Equal`` (values compared, an absent value is ``""``), ``Exists`` matches
  every value, ``Lt``/``Gt`` compare int64 values (``TaintTolerationComparisonOperators``, alpha in 1.35:
  modelled, since a cluster with the gate on accepts them).
- NodeResourcesFit: ``pkg/scheduler/framework/plugins/noderesources/fit.go`` (``fitsRequest``) with the
  pod's requests from ``staging/src/k8s.io/component-helpers/resource/helpers.go`` (``PodRequests`` /
  ``AggregateContainerRequests``): Σ regular containers + Σ restartable init containers (native
  sidecars, ``restartPolicy: Always``), against the largest init container (each counted with the
  sidecars started before it). A request of 0 is skipped; a resource the node does not list has
  allocatable 0. Requests default to limits (``pkg/apis/core/v1/defaults.go`` ``SetDefaults_Pod``).
  Only extended resources (names with a ``/``) are judged: the generated nodes never run out of CPU
  or memory.
- ``spec.nodeName``: the scheduler is bypassed; the kubelet's admission (``pkg/kubelet/lifecycle/
  predicate.go``, ``generalFilter``: ``GeneralPredicates`` then the taints "Kubelet is only interested
  in", ``NoExecute``) still checks the node's name, node affinity, resources and ``NoExecute`` taints,
  not ``NoSchedule`` ones (``TaintEffectNoSchedule``'s API doc: pods "submitted to Kubelet without
  going through the scheduler" start).
- API validation (``pkg/apis/core/validation/validation.go``) for the fields modelled here: what it
  rejects is never stored, so it never binds (:func:`rejected_by_apiserver`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

FILTERING_EFFECTS = ("NoSchedule", "NoExecute")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, str], ...] = ()
    allocatable: Mapping[str, int] = field(default_factory=dict)
    pool: str | None = None  # the pool it was generated for (None: a CPU-only node); not a Kubernetes field

    def as_k8s(self) -> dict[str, Any]:
        """The Node object as the API server would serve it."""
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": dict(self.labels)},
            "spec": {"taints": [dict(t) for t in self.taints]} if self.taints else {},
            "status": {
                "allocatable": {"cpu": "64", "memory": "512Gi", **{k: str(v) for k, v in self.allocatable.items()}}
            },
        }


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


# --- TaintToleration ---------------------------------------------------------------------------------


def _int64(text: Any) -> int | None:
    if not isinstance(text, str) or not re.fullmatch(r"[+-]?[0-9]+", text):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """``Toleration.ToleratesTaint``."""
    effect = toleration.get("effect") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    key = toleration.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    operator = toleration.get("operator") or ""
    if operator in ("", "Equal"):
        return (toleration.get("value") or "") == (taint.get("value") or "")
    if operator == "Exists":
        return True
    if operator in ("Lt", "Gt"):
        mine, theirs = _int64(toleration.get("value") or ""), _int64(taint.get("value") or "")
        if mine is None or theirs is None:
            return False
        return theirs < mine if operator == "Lt" else theirs > mine
    return False


def untolerated_taints(spec: Mapping[str, Any], node: Node, effects: Iterable[str] = FILTERING_EFFECTS) -> list:
    tolerations = [t for t in _list(spec.get("tolerations")) if isinstance(t, dict)]
    return [
        taint
        for taint in node.taints
        if taint.get("effect") in effects and not any(tolerates(t, taint) for t in tolerations)
    ]


# --- NodeAffinity ------------------------------------------------------------------------------------


def requirement_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """``labels.Requirement.Matches`` for a (valid) node selector requirement."""
    key, op = expr.get("key"), expr.get("operator")
    values = [v for v in _list(expr.get("values"))]
    has = key in labels
    if op == "In":
        return has and labels[key] in values
    if op == "NotIn":
        return not has or labels[key] not in values
    if op == "Exists":
        return has
    if op == "DoesNotExist":
        return not has
    if op in ("Gt", "Lt"):
        if not has or len(values) != 1:
            return False
        mine, bound = _int64(labels[key]), _int64(values[0])
        if mine is None or bound is None:
            return False
        return mine > bound if op == "Gt" else mine < bound
    return False


def term_matches(term: Mapping[str, Any], node: Node) -> bool:
    """One nodeSelectorTerm: its expressions and its fields, all ANDed (an empty term never gets here)."""
    exprs = [e for e in _list(term.get("matchExpressions")) if isinstance(e, dict)]
    fields_ = [e for e in _list(term.get("matchFields")) if isinstance(e, dict)]
    if exprs and not all(requirement_matches(e, node.labels) for e in exprs):
        return False
    node_fields = {"metadata.name": node.name} if node.name else {}
    if fields_ and node_fields:  # upstream: field requirements are ignored for a node without a name
        for e in fields_:
            have = node_fields.get(e.get("key"), "")
            want = _list(e.get("values"))[0]
            if e.get("operator") == "In" and have != want:
                return False
            if e.get("operator") == "NotIn" and have == want:
                return False
    return True


def _is_empty_term(term: Any) -> bool:
    return not isinstance(term, dict) or (not term.get("matchExpressions") and not term.get("matchFields"))


def required_node_affinity_matches(spec: Mapping[str, Any], node: Node) -> bool:
    """``RequiredNodeAffinity.Match``: nodeSelector AND (required terms ORed)."""
    selector = _dict(spec.get("nodeSelector"))
    if any(node.labels.get(k) != v for k, v in selector.items()):
        return False
    required = _dict(_dict(spec.get("affinity")).get("nodeAffinity")).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:  # upstream: only a non-nil required NodeSelector restricts
        return True
    required = _dict(required)
    terms = [t for t in _list(required.get("nodeSelectorTerms")) if not _is_empty_term(t)]
    return any(term_matches(t, node) for t in terms)


# --- NodeResourcesFit --------------------------------------------------------------------------------

_SUFFIX = {
    "": 1,
    "m": Fraction(1, 1000),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def quantity(value: Any) -> Fraction | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Fraction(value)
    if not isinstance(value, str):
        return None
    match = re.fullmatch(r"([+-]?[0-9]+(?:\.[0-9]*)?|[+-]?\.[0-9]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?", value)
    if not match:
        return None
    return Fraction(match.group(1)) * _SUFFIX[match.group(2) or ""]


def _is_extended(name: str) -> bool:
    return "/" in name


def container_requests(container: Mapping[str, Any]) -> dict[str, Fraction]:
    """Extended-resource requests of one container, defaulted from limits as the API server does."""
    resources = _dict(container.get("resources"))
    limits, requests = _dict(resources.get("limits")), _dict(resources.get("requests"))
    out: dict[str, Fraction] = {}
    for name in {**limits, **requests}:
        if not _is_extended(name):
            continue
        value = quantity(requests[name] if name in requests else limits[name])
        if value is not None:
            out[name] = value
    return out


def _add(into: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, Fraction(0)) + v


def _max(into: dict[str, Fraction], other: Mapping[str, Fraction]) -> None:
    for k, v in other.items():
        if v > into.get(k, Fraction(0)):
            into[k] = v


def pod_requests(spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """``AggregateContainerRequests`` (KEP-753 sidecar formula), extended resources only."""
    total: dict[str, Fraction] = {}
    for c in _list(spec.get("containers")):
        _add(total, container_requests(_dict(c)))
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for c in _list(spec.get("initContainers")):
        c = _dict(c)
        own = container_requests(c)
        if c.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            use = dict(sidecars)
        else:
            use = dict(own)
            _add(use, sidecars)
        _max(init_peak, use)
    _max(total, init_peak)
    return total


def fits(spec: Mapping[str, Any], node: Node) -> bool:
    """``fitsRequest`` for extended resources on an empty node."""
    for name, amount in pod_requests(spec).items():
        if amount == 0:
            continue
        if amount > node.allocatable.get(name, 0):
            return False
    return True


# --- the whole picture -------------------------------------------------------------------------------


def can_bind(pod: Mapping[str, Any], node: Node) -> bool:
    """Could this (stored) pod end up running on ``node``?"""
    spec = _dict(pod.get("spec"))
    if rejected_by_apiserver(pod):
        return False
    node_name = spec.get("nodeName")
    if node_name:
        return (
            node_name == node.name
            and required_node_affinity_matches(spec, node)
            and not untolerated_taints(spec, node, effects=("NoExecute",))
            and fits(spec, node)
        )
    return required_node_affinity_matches(spec, node) and not untolerated_taints(spec, node) and fits(spec, node)


def reach(pod: Mapping[str, Any], nodes: Iterable[Node]) -> list[Node]:
    return [n for n in nodes if can_bind(pod, n)]


def _requirement_errors(expr: Any, fields: bool) -> str | None:
    if not isinstance(expr, dict):
        return "requirement is not an object"
    op, values = expr.get("operator"), expr.get("values")
    values = values if isinstance(values, list) else []
    if fields:
        if expr.get("key") != "metadata.name":
            return "matchFields supports only metadata.name"
        if op not in ("In", "NotIn") or len(values) != 1:
            return "matchFields metadata.name needs In/NotIn with exactly one value"
        return None
    if op in ("In", "NotIn"):
        return None if values else f"{op} needs values"
    if op in ("Exists", "DoesNotExist"):
        return "values must be empty" if values else None
    if op in ("Gt", "Lt"):
        return None if len(values) == 1 and _int64(values[0]) is not None else f"{op} needs one integer"
    return f"unknown operator {op!r}"


def rejected_by_apiserver(pod: Mapping[str, Any]) -> str | None:
    """Why the API server's validation refuses this pod (for the fields the oracle models), or None."""
    spec = _dict(pod.get("spec"))
    for t in _list(spec.get("tolerations")):
        t = _dict(t)
        op = t.get("operator") or "Equal"
        if not t.get("key") and op != "Exists":
            return "a toleration with an empty key must use operator Exists"
        if op == "Exists" and t.get("value"):
            return "a toleration with operator Exists must have no value"
        if op not in ("Equal", "Exists", "Lt", "Gt"):
            return f"toleration operator {op!r}"
        if op in ("Lt", "Gt") and _int64(t.get("value") or "") is None:
            return "Lt/Gt toleration needs an integer value"
        if t.get("effect") not in (None, "", *EFFECTS):
            return "unknown toleration effect"
    affinity = _dict(_dict(spec.get("affinity")).get("nodeAffinity"))
    if "requiredDuringSchedulingIgnoredDuringExecution" in affinity:
        terms = _list(_dict(affinity["requiredDuringSchedulingIgnoredDuringExecution"]).get("nodeSelectorTerms"))
        if not terms:
            return "required node affinity needs at least one term"
        for term in terms:
            term = _dict(term)
            for e in _list(term.get("matchExpressions")):
                if (why := _requirement_errors(e, fields=False)) is not None:
                    return why
            for e in _list(term.get("matchFields")):
                if (why := _requirement_errors(e, fields=True)) is not None:
                    return why
    for group in ("containers", "initContainers"):
        for c in _list(spec.get(group)):
            resources = _dict(_dict(c).get("resources"))
            limits, requests = _dict(resources.get("limits")), _dict(resources.get("requests"))
            for name in {**limits, **requests}:
                if not _is_extended(name):
                    continue
                if name not in limits:
                    return f"{name}: a limit must be set"
                value = quantity(limits[name])
                if value is None or value.denominator != 1 or value < 0:
                    return f"{name}: must be a non-negative integer"
                if name in requests and quantity(requests[name]) != value:
                    return f"{name}: requests must equal limits"
    for c in _list(spec.get("ephemeralContainers")):
        if _dict(c).get("resources"):
            return "ephemeral containers may not set resources"
    return None
