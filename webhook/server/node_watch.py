"""A list/watch cache of Nodes: what each GPU pool's nodes really advertise.

The policy says how a pool's cards are partitioned (``mig.layout`` / ``mig.profiles``); the nodes'
allocatable ``nvidia.com/mig-*`` and their ``nvidia.com/mig.config`` label say what the scheduler will
bind against. The cache keeps, per node, only its labels, taints and allocatable (a Node object carries
its image list too: hundreds of KiB on a busy node), and derives from them, once per change of nodes or
policy:

- per pool, the MIG resources some node of it advertises: the engine's ``Cluster.pool_mig``, so that a
  pod is translated to a profile its pool's nodes have (``webhook.engine.model.node_truth``) and a hand-written
  one they lack is ``mig-profile-unavailable`` (every Node is not handed to every review: that would make
  each review's cost grow with the cluster);
- per pool, the nodes that disagree with its geometry: the gauge
  ``gpu_admission_pool_mig_nodes_disagreeing{pool}`` and one log line when the answer changes.

The list/watch loop is the namespace cache's (:class:`~webhook.server.claim_watch.ObjectWatchCache`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from webhook.policy.compiled import Policy
from webhook.policy.geometry import advertised_by_pool, pool_mismatches
from webhook.server import metrics
from webhook.server.claim_watch import ObjectWatchCache
from webhook.server.logs import server_log

NODE_SPEC = ("list_node", False)  # CoreV1Api method, cluster-scoped


def slim(node: dict[str, Any]) -> dict[str, Any]:
    """What the pools are judged by: name and labels, taints, allocatable."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    return {
        "metadata": {"name": meta.get("name"), "labels": dict(meta.get("labels") or {})},
        "spec": {"taints": list(spec.get("taints") or [])},
        "status": {"allocatable": dict(status.get("allocatable") or {})},
    }


class NodeObjects:
    """The node cache and the views derived from it, per policy."""

    def __init__(self, cache: ObjectWatchCache):
        self.cache = cache
        self._lock = threading.Lock()
        self._view: tuple[Any, ...] = ()  # (policy, version, pool_mig, mismatches)
        self._reported: dict[str, int] = {}

    @classmethod
    def from_api(cls, api_factory: Callable[[], Any], **options: Any) -> NodeObjects:
        return cls(ObjectWatchCache(api_factory, "nodes", spec=NODE_SPEC, keep=slim, **options))

    @property
    def ready(self) -> bool:
        return self.cache.ready

    def start(self) -> None:
        self.cache.start()

    def stop(self) -> None:
        self.cache.stop()

    def status(self) -> dict[str, Any]:
        return self.cache.status()

    def _derive(self, policy: Policy) -> tuple[Mapping[str, frozenset[str]], list[tuple[str, str, str]]]:
        version = self.cache.version
        view = self._view
        if view and view[0] is policy and view[1] == version:
            return view[2], view[3]
        with self._lock:
            nodes = tuple(self.cache.objects.values())
            pool_mig = {}
            for name, pool in policy.pools.items():
                found = advertised_by_pool(pool, nodes)
                if found is not None:
                    pool_mig[name] = frozenset(found)
            mismatches = pool_mismatches(policy, nodes)
            self._view = (policy, version, MappingProxyType(pool_mig), mismatches)
        return self._view[2], self._view[3]

    def pool_mig(self, policy: Policy) -> Mapping[str, frozenset[str]] | None:
        """The engine's ``Cluster.pool_mig`` (``None`` until the first list: nothing known yet)."""
        if not self.cache.ready:
            return None
        return self._derive(policy)[0]

    def publish(self, policy: Policy) -> dict[str, int]:
        """Set the per-pool gauge (every MIG pool, 0 when its nodes agree) and log what changed."""
        if not self.cache.ready:
            return {}
        _, mismatches = self._derive(policy)
        counts = {p: 0 for p, pool in policy.pools.items() if pool.spec.mig is not None}
        for pool, message, _hint in mismatches:
            counts[pool] = int(message.split(" ", 1)[0])
        for pool, count in counts.items():
            metrics.POOL_GEOMETRY_MISMATCH.labels(pool).set(count)
            if self._reported.get(pool) != count and count:
                detail = next(m for p, m, _ in mismatches if p == pool)
                server_log.warning(
                    "pool MIG geometry disagrees with its nodes", extra={"fields": {"pool": pool, "detail": detail}}
                )
        self._reported = counts
        return counts


def core_api_from_config(kubeconfig: str | None = None) -> Any:
    """CoreV1Api for the node watch, configured as the namespace watch's client is."""
    from webhook.server.namespace_watch import api_from_config

    return api_from_config(kubeconfig)
