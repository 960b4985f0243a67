"""The nodes are the truth: a MIG translation checked against what the pool's nodes advertise.

The policy's geometry (``mig.layout`` / ``mig.profiles``) is what the platform team believes its nodes
run; with Node objects known (``check --cluster-objects``, the server's node watch) their allocatable
``nvidia.com/mig-*`` is what the scheduler binds against. A translation to a profile none of them
advertises would stay Pending: it becomes the smallest advertised profile that holds the request, or a
``gpu-memory-exceeded`` failure naming the largest one there. Only device-plugin MIG (mixed strategy):
DRA nodes and the single strategy do not advertise ``nvidia.com/mig-*``.
"""

from __future__ import annotations

from dataclasses import replace

from webhook.engine.model.cluster import Cluster
from webhook.engine.model.resolution import Failure, Resolution
from webhook.policy.compiled import CompiledPool
from webhook.policy.dra import memory_quantity
from webhook.policy.geometry import advertised_by_pool
from webhook.policy.model import Isolation
from webhook.quantity import format_bytes


def advertised(cluster: Cluster, pool: CompiledPool) -> frozenset[str] | set[str] | None:
    """MIG resources the pool's nodes advertise, when its nodes are known (``None``: trust the policy)."""
    if pool.spec.dra is not None and Isolation.MIG in pool.spec.dra.device_classes:
        return None  # MIG devices through DRA: nothing is advertised as an extended resource
    if cluster.pool_mig is not None:
        return cluster.pool_mig.get(pool.name)
    return advertised_by_pool(pool, cluster.nodes) if cluster.nodes else None


def on_nodes(cluster: Cluster, res: Resolution, path: str) -> Resolution | Failure:
    """``res`` as the pool's nodes can serve it (unchanged when they advertise its profile or are unknown)."""
    pool, profile = res.pool, res.profile
    if profile is None or res.claim is not None or res.memory is None or pool.spec.mig is None:
        return res
    if pool.spec.mig.strategy != "mixed":
        return res
    have = advertised(cluster, pool)
    if have is None or profile.resource in have:
        return res
    there = sorted((p for p in pool.gpu.profiles if p.plain and p.resource in have), key=lambda p: (p.memory, p.slices))
    fits = next((p for p in there if p.memory >= res.memory), None)
    listed = ", ".join(sorted(have)) or "no MIG devices"
    if fits is None:
        largest = f"ask for at most {memory_quantity(there[-1].memory)}" if there else "ask for a whole GPU"
        return Failure(
            "gpu-memory-exceeded",
            path,
            f"no MIG device the nodes of pool {pool.name} advertise holds {format_bytes(res.memory)} "
            f"(they advertise {listed}); {largest}",
        )
    chosen = replace(fits, per_gpu=max(fits.per_gpu, fits.max))  # instances per GPU: the nodes', at most max
    return replace(
        res,
        resources={chosen.resource: "1"},
        profile=chosen,
        device_bytes=chosen.memory,
        device_name=f"MIG {chosen.name} of {pool.spec.gpu_model}",
        why=f"{res.why}; the pool's nodes advertise {listed}, not {profile.resource}: {chosen.resource}",
    )
