"""Which pools a pod template can reach, judged the way kube-scheduler's filters judge a node.

Rules judge what the cluster will do with an object, not the shape the user wrote: a blanket
toleration, a ``NotIn`` term or a hostname selector reaches a pool as surely as the pool's own
selector. A pool is known by the labels it fixes (its ``nodeSelector``), the taints every node carries
(explicit ``taints``, else derived from its tolerations) and the GPU/RDMA resources its nodes advertise.
A template reaches a pool when:

- TaintToleration: every ``NoSchedule``/``NoExecute`` taint is tolerated (an empty key with ``Exists``
  tolerates every taint, an empty effect every effect, ``Equal`` compares values, ``Gt``/``Lt`` compare
  them as integers (1.35's TaintTolerationComparisonOperators); a taint value or effect the policy
  leaves open matches). A pod that sets ``spec.nodeName`` skips the scheduler, and the kubelet's own
  admission filters on ``NoExecute`` taints alone: a ``NoSchedule`` taint, or one whose effect the
  policy leaves open, does not keep it out;
- NodeAffinity: no ``nodeSelector`` entry and not every required term is contradicted by the labels the
  pool fixes; a requirement on a label or field the pool does not fix (hostname, ``metadata.name``)
  can match, preferred terms never restrict;
- NodeResourcesFit: every GPU/RDMA resource the pod asks for (a positive amount, in any container) is
  one the pool offers;
- DynamicResources: every request of the pod's resolved DRA claims has an alternative the pool's DRA
  driver serves (``CompiledPool.serves_class``), and an extended resource a DeviceClass maps is served
  by the pool's device plugin or by that class. An unresolved claim narrows nothing: it may be any GPU.

With Node objects in the cluster view, a template that names its nodes (``spec.nodeName``, a hostname
selector, every required term naming nodes by ``metadata.name`` or hostname ``In``: DaemonSet pods)
and names only nodes that exist is judged node by node (the named node's own labels, name, taints and
allocatable resources): it can bind nowhere else. A name no known node carries may be a node that
joins later, in any pool, or one the Node objects given leave out, so such a template keeps the whole
model, as does any template that names no nodes: a node that joins later (a replacement, an
autoscaler scale-up the pending pod itself triggers) may carry any label the pool leaves open.
Every unknown is read as "can match": the model may see more reach than the scheduler, never less.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from webhook.engine.model.devices import PodResources
from webhook.policy.compiled import CompiledPool, Policy

FILTERING = frozenset({"NoSchedule", "NoExecute"})
KUBELET_FILTERING = frozenset({"NoExecute"})
"""What the kubelet's own admission filters on for a pod bound by ``spec.nodeName`` (``generalFilter``
in ``pkg/kubelet/lifecycle/predicate.go``: "Kubelet is only interested in the NoExecute taint")."""
FRACTION_DEVICE = "nvidia.com/gpu"
"""What a GPU-fraction pod (KAI ``gpu-fraction``) needs of a node: KAI shares a whole card that the
device plugin advertises as ``nvidia.com/gpu`` (its reservation pod holds it)."""

Toleration = tuple[str, str, str | None, str | None]  # key ("" = any), operator, value, effect (None = any)
Requirement = tuple[str, str, tuple[str, ...]]  # key, operator, values
Term = tuple[tuple[Requirement, ...], tuple[Requirement, ...]]  # matchExpressions, matchFields


@dataclass(frozen=True, slots=True)
class Placement:
    """The fields of a pod template the scheduler's filters read, as hashable data (the memo key)."""

    selector: tuple[tuple[str, str], ...]
    terms: tuple[Term, ...] | None  # None: no required node affinity
    tolerations: tuple[Toleration, ...]
    devices: frozenset[str]
    claims: frozenset[frozenset[tuple[str, ...]]] = frozenset()
    """DRA demand: per device request, the alternatives (``webhook.engine.model.claims.Alternative``) one of
    which a node must serve."""
    node_name: str = ""
    """``spec.nodeName``: the pod skips the scheduler and binds to that node if the kubelet admits it
    (node affinity, resources, ``NoExecute`` taints only)."""

    @property
    def filtering(self) -> frozenset[str]:
        """The taint effects that keep this template off a node."""
        return KUBELET_FILTERING if self.node_name else FILTERING


def _str(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else repr(value)


def toleration(item: Any) -> Toleration | None:
    if not isinstance(item, dict):
        return None
    effect = item.get("effect")
    value = item.get("value")
    return (
        _str(item.get("key")),
        _str(item.get("operator")) or "Equal",
        None if value is None else _str(value),
        _str(effect) or None,
    )


def _requirements(items: Any) -> tuple[Requirement, ...]:
    out = []
    for e in items if isinstance(items, list) else ():
        if isinstance(e, dict):
            values = e.get("values")
            vals = tuple(_str(v) for v in values) if isinstance(values, list) else ()
            out.append((_str(e.get("key")), _str(e.get("operator")), vals))
    return tuple(out)


def required_terms(spec: Mapping[str, Any]) -> list[Any] | None:
    """The pod's required node-affinity terms as written (entries unchecked, so an index is the
    field's own); None: no required node affinity at all, which is not the same as no terms."""
    node = spec.get("affinity")
    node = node.get("nodeAffinity") if isinstance(node, dict) else None
    node = node.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return None
    terms = node.get("nodeSelectorTerms")
    return terms if isinstance(terms, list) else []


def node_selector_in(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod's nodeSelector as written (empty when absent or not a map)."""
    selector = spec.get("nodeSelector")
    return selector if isinstance(selector, dict) else {}


def tolerations_in(spec: Mapping[str, Any]) -> list[Any]:
    """The pod's tolerations as written (entries unchecked, so an index is the field's own)."""
    tols = spec.get("tolerations")
    return tols if isinstance(tols, list) else []


def placement(spec: Mapping[str, Any], resources: PodResources) -> Placement:
    selector = spec.get("nodeSelector")
    sel = tuple(sorted((_str(k), _str(v)) for k, v in selector.items())) if isinstance(selector, dict) else ()
    raw_terms = required_terms(spec)
    terms = None
    if raw_terms is not None:
        terms = tuple(
            (_requirements(t.get("matchExpressions")), _requirements(t.get("matchFields")))
            if isinstance(t, dict)
            else ((), ())
            for t in raw_terms
        )
    tols = spec.get("tolerations")
    tolerations = tuple(t for t in map(toleration, tols) if t is not None) if isinstance(tols, list) else ()
    devices = set()
    demand: set[frozenset[tuple[str, ...]]] = set()
    mapped = resources.mapped
    for c in resources.containers:
        for key in c.families:
            if c.positive(key):
                if key not in mapped:
                    devices.add(key)
                elif mapped[key] is not None:  # device plugin or DRA (an unknown class narrows nothing)
                    demand.add(frozenset({("resource", key), mapped[key]}))  # type: ignore[arg-type]
    if resources.claims:
        demand.update(resources.dra_demand)
    if resources.fractions:  # a scheduler's GPU share (KAI) lands on nodes that advertise whole GPUs
        devices.add(FRACTION_DEVICE)
    node_name = spec.get("nodeName")
    return Placement(
        sel, terms, tolerations, frozenset(devices), frozenset(demand), node_name if isinstance(node_name, str) else ""
    )


def _served(pool: CompiledPool, alternative: tuple[str, ...], allocatable: Mapping[str, Any] | None) -> bool:
    if alternative[0] == "resource":
        key = alternative[1]
        return _positive(allocatable.get(key)) if allocatable is not None else key in pool.offers
    _, name, driver, kind = alternative
    return pool.serves_class(name, driver, kind)


def claims_served(pool: CompiledPool, pl: Placement, allocatable: Mapping[str, Any] | None = None) -> bool:
    """Every DRA request of the template has an alternative the pool (or, with ``allocatable``, one of
    its nodes) serves."""
    return all(any(_served(pool, alt, allocatable) for alt in request) for request in pl.claims)


# --- the filters --------------------------------------------------------------------------------------


def tolerates(tol: Toleration, key: str, value: str | None, effect: str | None) -> bool:
    """Kubernetes ``Toleration.ToleratesTaint``, with ``None`` taint value/effect meaning "unknown"."""
    t_key, op, t_value, t_effect = tol
    if t_effect is not None and effect is not None and t_effect != effect:
        return False
    if t_key == "":
        return op == "Exists"
    if t_key != key:
        return False
    if op == "Exists":
        return True
    if op == "Equal":
        return value is None or (t_value or "") == value
    if op in ("Gt", "Lt"):  # TaintTolerationComparisonOperators (1.35): the values compared as int64
        bound = int64(t_value or "")
        if bound is None:
            return False  # compares with nothing (the apiserver rejects it)
        if value is None:
            return True  # a taint value the policy leaves open may be any number
        have = int64(value)
        return have is not None and (have > bound if op == "Gt" else have < bound)
    return False


_INT64 = re.compile(r"[+-]?[0-9]+")


def int64(text: str) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``: ASCII digits only (``int`` also takes other scripts' digits and spaces)."""
    if not _INT64.fullmatch(text):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


def untolerated(
    taints: Iterable[tuple[str, str | None, str | None]],
    tolerations: tuple[Toleration, ...],
    filtering: frozenset[str] = FILTERING,
):
    """The filtering taints no toleration tolerates. A taint whose effect is unknown (``None``) filters
    only where every effect does: otherwise it may be one that lets the pod in."""
    return [
        (key, value, effect)
        for key, value, effect in taints
        if (effect in filtering if effect is not None else filtering == FILTERING)
        and not any(tolerates(t, key, value, effect) for t in tolerations)
    ]


def _int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def requirement_can_match(req: Requirement, labels: Mapping[str, str], *, open_keys: bool) -> bool:
    """One ``matchExpressions`` entry against labels. With ``open_keys`` a key absent from ``labels`` is
    one the pool does not fix: its nodes may carry any value, so the requirement can match."""
    key, op, values = req
    if key not in labels:
        if open_keys:
            return op != "In" or bool(values)
        return op in ("NotIn", "DoesNotExist")
    have = labels[key]
    if op == "In":
        return have in values
    if op == "NotIn":
        return have not in values
    if op == "Exists":
        return True
    if op == "DoesNotExist":
        return False
    if op in ("Gt", "Lt"):
        mine, bound = _int(have), _int(values[0]) if len(values) == 1 else None
        if bound is None:
            return open_keys  # a malformed bound: the apiserver rejects it; the model never narrows on it
        if mine is None:
            return False  # a label value that is not an integer never compares
        return mine > bound if op == "Gt" else mine < bound
    return open_keys  # an operator the apiserver rejects


def labels_admit(labels: Mapping[str, str], pl: Placement, *, open_keys: bool = True, name: str | None = None) -> bool:
    """nodeSelector and required terms against a pool's fixed labels (``open_keys``) or a node's labels."""
    for key, value in pl.selector:
        if key in labels:
            if labels[key] != value:
                return False
        elif not open_keys:
            return False
    if pl.terms is None:
        return True
    for expressions, fields in pl.terms:
        if not expressions and not fields:
            continue  # an empty term matches no node
        if not all(requirement_can_match(r, labels, open_keys=open_keys) for r in expressions):
            continue
        if name is None:  # a pool fixes no node names: metadata.name requirements can match
            if all(op != "In" or values for _, op, values in fields):
                return True
            continue
        node_fields = {"metadata.name": name}
        if all(requirement_can_match(r, node_fields, open_keys=False) for r in fields):
            return True
    return False


def pool_admits(pool: CompiledPool, pl: Placement, *, taints: bool = True) -> bool:
    if pl.devices and not pl.devices <= pool.offers:
        return False
    if pl.claims and not claims_served(pool, pl):
        return False
    if taints and untolerated(pool.taints, pl.tolerations, pl.filtering):
        return False
    return labels_admit(pool.spec.node_selector, pl)


ANY_NODE = "*"
"""The memo key's stand-in for a ``nodeName``: the model knows no node names, only that one is set (every
bound pod has its own, so the names themselves would crowd the policy's memo)."""


def _model_reach(policy: Policy, pl: Placement) -> frozenset[str]:
    key = replace(pl, node_name=ANY_NODE) if pl.node_name else pl
    return policy.recall(("reach", key), lambda: frozenset(n for n, p in policy.pools.items() if pool_admits(p, pl)))


def node_admits(node: Mapping[str, Any], pl: Placement) -> bool:
    meta = node.get("metadata") if isinstance(node.get("metadata"), dict) else {}
    spec = node.get("spec") if isinstance(node.get("spec"), dict) else {}
    status = node.get("status") if isinstance(node.get("status"), dict) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    name = _str(meta.get("name"))
    if pl.node_name and pl.node_name != name:
        return False
    if not labels_admit(labels, pl, open_keys=False, name=name):
        return False
    taints = [
        (_str(t.get("key")), None if t.get("value") is None else _str(t.get("value")), _str(t.get("effect")))
        for t in spec.get("taints") or ()
        if isinstance(t, dict)
    ]
    if untolerated(taints, pl.tolerations, pl.filtering):
        return False
    allocatable = status.get("allocatable") if isinstance(status.get("allocatable"), dict) else {}
    return all(_positive(allocatable.get(d)) for d in pl.devices)


def _positive(value: Any) -> bool:
    if value is None:
        return False
    text = _str(value)
    return not (text.strip("0") == "" or text.startswith("-"))


def node_pools(policy: Policy, node: Mapping[str, Any]) -> tuple[str, ...]:
    """Pools a Node belongs to: those whose (non-empty) nodeSelector its labels carry."""
    meta = node.get("metadata") if isinstance(node.get("metadata"), dict) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    return tuple(
        n
        for n, p in policy.pools.items()
        if p.spec.node_selector and all(labels.get(k) == v for k, v in p.spec.node_selector.items())
    )


def reachable(policy: Policy, pl: Placement, nodes: tuple[Mapping[str, Any], ...] = ()) -> frozenset[str]:
    """Pool names the template can be bound into (see the module docstring)."""
    if not nodes:
        return _model_reach(policy, pl)
    found: set[str] = set()
    for node in nodes:
        if not isinstance(node, Mapping):
            continue
        pools = node_pools(policy, node)
        if pools and node_admits(node, pl):
            if pl.claims:
                status = node.get("status") if isinstance(node.get("status"), dict) else {}
                allocatable = status.get("allocatable") if isinstance(status.get("allocatable"), dict) else {}
                pools = tuple(p for p in pools if claims_served(policy.pools[p], pl, allocatable))
            found.update(pools)
    if not names_nodes(pl, nodes):  # nodes join later (replacements, autoscaling): the model judges what they may be
        found.update(_model_reach(policy, pl))
    return frozenset(found)


HOSTNAME = "kubernetes.io/hostname"


def names_nodes(pl: Placement, nodes: tuple[Mapping[str, Any], ...]) -> bool:
    """The template can bind only to nodes it names, and every name it gives is a node in ``nodes``
    (``spec.nodeName``; a hostname selector; every required term with a ``metadata.name`` or hostname
    ``In``): the only case the nodes known now decide for good. A node that joins later has a new name
    but may carry any label, zone or hostname the pool leaves open; and a name no known node carries
    may be exactly the node that joins next, in any pool."""
    host = [value for key, value in pl.selector if key == HOSTNAME]
    terms = [t for t in pl.terms or () if t[0] or t[1]]
    if not (pl.node_name or host or terms):
        return False
    names, hostnames = _known_names(nodes)
    if pl.node_name:
        return pl.node_name in names
    if host:
        return host[0] in hostnames
    return all(
        any(key == "metadata.name" and op == "In" and set(values) <= names for key, op, values in fields)
        or any(key == HOSTNAME and op == "In" and set(values) <= hostnames for key, op, values in expressions)
        for expressions, fields in terms
    )


def _known_names(nodes: tuple[Mapping[str, Any], ...]) -> tuple[set[str], set[str]]:
    """The names and ``kubernetes.io/hostname`` labels of the known nodes."""
    names: set[str] = set()
    hostnames: set[str] = set()
    for node in nodes:
        meta = node.get("metadata") if isinstance(node, Mapping) else None
        if isinstance(meta, dict):
            names.add(_str(meta.get("name")))
            labels = meta.get("labels")
            if isinstance(labels, dict) and isinstance(labels.get(HOSTNAME), str):
                hostnames.add(labels[HOSTNAME])
    return names, hostnames


_TOLERATION_KEYS = ("key", "operator", "value", "effect")


def normal_toleration(toleration: object) -> tuple:
    """Comparable form of a toleration (operator defaults to Equal); non-scalar values never match."""
    if not isinstance(toleration, dict):
        return ()
    values = (
        toleration.get("key"),
        toleration.get("operator") or "Equal",
        toleration.get("value"),
        toleration.get("effect"),
    )
    for v in values:
        if v is not None and type(v) is not str:
            return tuple(v if isinstance(v, str | None) else repr(v) for v in values)
    return values


def toleration_forms(policy: Policy, pool: CompiledPool) -> tuple[tuple, ...]:
    """The normal forms of a pool's tolerations, in order; computed once per policy, not per review."""
    return policy.recall(("forms", pool.name), lambda: tuple(normal_toleration(t) for t in pool.tolerations))
