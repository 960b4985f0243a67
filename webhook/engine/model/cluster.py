"""What the engine may know about the cluster beyond the object itself, as plain data.

The engine does no I/O: the edges gather this (the server from its watches, ``check`` from its inputs
and ``--context`` files, ``policy test`` from the suite) and pass one immutable view per review. Every
field is optional knowledge: an empty view means "nothing known", and each rule decides what unknown
means for it (for example an unresolvable resource claim is treated as a GPU claim).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

_EMPTY: Mapping[Any, Any] = MappingProxyType({})


def _empty() -> Mapping[Any, Any]:
    return _EMPTY


@dataclass(frozen=True, slots=True)
class Cluster:
    """Objects the webhook would look up in the cluster, keyed as the apiserver names them.

    - ``namespaces``: namespace name -> its labels (the entitlement trust anchor);
    - ``nodes``: Node objects, for exact per-node placement judgement;
    - ``claim_templates`` / ``claims``: (namespace, name) -> ResourceClaimTemplate / ResourceClaim;
    - ``device_classes``: name -> DeviceClass;
    - ``resource_slices``: name -> ResourceSlice (the devices, their capacity and its request policies);
    - ``compute_domains``: (namespace, name) -> ComputeDomain (NVIDIA's multi-node NVLink domains);
    - ``complete``: whether the claim maps are all there is;
    - ``unknown_namespaces``: namespaces looked up and not found.
    """

    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=_empty)
    nodes: tuple[Mapping[str, Any], ...] = ()
    claim_templates: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=_empty)
    claims: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=_empty)
    device_classes: Mapping[str, Mapping[str, Any]] = field(default_factory=_empty)
    resource_slices: Mapping[str, Mapping[str, Any]] = field(default_factory=_empty)
    compute_domains: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=_empty)
    domain_users: Mapping[tuple[str, str], frozenset[str]] = field(default_factory=_empty)
    """(namespace, ComputeDomain) -> the workloads (``Kind/name``) other than the one judged that claim its
    channel, when the edge knows them (``check``: its inputs); empty when unknown (the server)."""
    complete: bool = False
    """The claim maps are the whole cluster (a synced watch, ``check --cluster-objects``): a template that is
    not there does not exist. Otherwise absence only means "not known"."""
    pool_mig: Mapping[str, frozenset[str]] | None = None
    """Pool -> the ``nvidia.com/mig-*`` resources some node of the pool advertises, for pools whose nodes
    are known (the server's node watch, which does not pass every Node to every review). ``None``: not
    known this way (``mig-profile-unavailable`` then reads ``nodes`` when there are any)."""
    unknown_namespaces: frozenset[str] = frozenset()
    """Namespaces the edge looked for and could not find (not in the server's watch cache, and a GET
    answered 404, failed or timed out). Their labels, hence their entitlement, are unknown: a GPU
    object in one is denied (``class-not-allowed``, retry), never judged by the catch-all entitlement
    that an unlabelled namespace would get. Offline edges (``check``, ``policy test``) never set it."""


EMPTY_CLUSTER = Cluster()
