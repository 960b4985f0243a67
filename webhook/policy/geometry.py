"""A pool's MIG geometry against its nodes: what their allocatable ``nvidia.com/mig-*`` and
``nvidia.com/mig.config`` label say.

With Node objects known (``check --cluster-objects``, ``policy lint --cluster-objects``) the nodes are the truth: the
policy's layout is what the platform team believes, the allocatable list is what the scheduler binds
against. Pure functions over plain Node dicts; used by lint and by ``mig-profile-unavailable``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.policy.compiled import CompiledPool, Policy
from webhook.policy.model import Isolation

MIG_PREFIX = "nvidia.com/mig-"
CONFIG_LABEL = "nvidia.com/mig.config"


def _labels(node: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = node.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _count(value: Any) -> int:
    text = str(value)
    return int(text) if text.isascii() and text.isdigit() else 0


def advertised(node: Mapping[str, Any]) -> dict[str, int]:
    """MIG resource -> allocatable count on one node (zero counts left out)."""
    status = node.get("status")
    alloc = status.get("allocatable") if isinstance(status, Mapping) else None
    if not isinstance(alloc, Mapping):
        return {}
    return {k: n for k, v in alloc.items() if str(k).startswith(MIG_PREFIX) and (n := _count(v)) > 0}


def pool_nodes(pool: CompiledPool, nodes: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The nodes whose labels carry the pool's nodeSelector."""
    selector = pool.spec.node_selector
    if not selector:
        return []
    return [n for n in nodes if all(_labels(n).get(k) == v for k, v in selector.items())]


def node_name(node: Mapping[str, Any]) -> str:
    meta = node.get("metadata")
    return str(meta.get("name", "?")) if isinstance(meta, Mapping) else "?"


def advertised_by_pool(pool: CompiledPool, nodes: Sequence[Mapping[str, Any]]) -> set[str] | None:
    """MIG resources some node of the pool advertises; ``None`` when no node of the pool is known."""
    mine = pool_nodes(pool, nodes)
    if not mine:
        return None
    return {key for node in mine for key in advertised(node)}


def _expected(pool: CompiledPool) -> dict[str, int]:
    return {p.resource: p.per_gpu * pool.spec.gpus_per_node for p in pool.profiles}


def pool_mismatches(policy: Policy, nodes: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """(pool, message, hint) for each MIG pool whose known nodes disagree with its stated geometry."""
    out: list[tuple[str, str, str]] = []
    for name, pool in policy.pools.items():
        mig = pool.spec.mig
        if mig is None or Isolation.MIG not in pool.isolation or mig.strategy != "mixed":
            continue
        if pool.spec.dra is not None and Isolation.MIG in pool.spec.dra.device_classes:
            continue  # MIG through DRA: the nodes publish ResourceSlices, not nvidia.com/mig-* resources
        mine = pool_nodes(pool, nodes)
        if not mine:
            continue
        expected = _expected(pool)
        bad: list[str] = []
        for node in mine:
            have = advertised(node)
            config = _labels(node).get(CONFIG_LABEL)
            parts = []
            if mig.layout is not None and config is not None and config != mig.layout:
                parts.append(f"{CONFIG_LABEL}={config}, not {mig.layout}")
            missing = sorted(set(expected) - set(have))
            extra = sorted(set(have) - set(expected))
            if missing:
                parts.append(f"does not advertise {', '.join(missing)}")
            if extra:
                parts.append(f"advertises {', '.join(f'{k}: {have[k]}' for k in extra)} the pool does not list")
            if mig.layout is not None or isinstance(mig.profiles, dict):
                fewer = [f"{k}: {have[k]} of {n}" for k, n in sorted(expected.items()) if k in have and have[k] != n]
                if fewer:
                    parts.append(f"allocatable {', '.join(fewer)} ({pool.spec.gpus_per_node} GPUs x the layout)")
            if parts:
                bad.append(f"node {node_name(node)} " + "; ".join(parts))
        if bad:
            shown = "; ".join(bad[:3]) + (f"; and {len(bad) - 3} more node(s)" if len(bad) > 3 else "")
            stated = f"layout {mig.layout}" if mig.layout is not None else "profiles " + ", ".join(expected)
            out.append(
                (
                    name,
                    f"{len(bad)} of {len(mine)} node(s) of pool {name!r} disagree with its MIG geometry ({stated}): "
                    f"{shown}",
                    "set mig.layout (or mig.profiles) to what the nodes run, or re-apply the layout with the "
                    "MIG manager (label nvidia.com/mig.config)",
                )
            )
    return out
