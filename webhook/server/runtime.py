"""What one server process holds: the policy store, the namespace source, the TLS reloader, and the
background work that keeps them current.

Built in the gunicorn master (``preload_app``: the engine and the policy are imported and compiled
once, then shared copy-on-write), but the threads start in each worker after fork (``start``), since
threads and open sockets do not survive ``fork``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from webhook.engine.model.grants import GrantKeys
from webhook.server import metrics
from webhook.server.admission import Admitter
from webhook.server.logs import server_log
from webhook.server.namespaces import NamespaceSource, OfflineNamespaces
from webhook.server.reload import PolicyStore, Ticker
from webhook.server.tls import CertReloader


@dataclass
class Runtime:
    store: PolicyStore
    namespaces: NamespaceSource = field(default_factory=OfflineNamespaces)
    tls: CertReloader | None = None
    policy_interval: float = 2.0
    engine_deadline: float | None = None
    claims: Any = None  # webhook.server.claim_watch.ClaimObjects, when DRA objects are watched
    nodes: Any = None  # webhook.server.node_watch.NodeObjects, when Nodes are watched
    geometry_interval: float = 15.0  # seconds between publishing the pools' geometry gauge
    parents: Any = None  # webhook.server.scale.ApiParents: reads what a `<resource>/scale` review scales
    grant_keys: GrantKeys | None = None  # exception grants' HMAC keys (serve --grant-key)
    admitter: Admitter = field(init=False)
    _tickers: list[Ticker] = field(default_factory=list, init=False)
    _said: tuple[str, ...] | None = field(default=None, init=False)  # the last readiness answer, logged

    def __post_init__(self) -> None:
        self.admitter = Admitter(
            self.store,
            self.namespaces,
            engine_deadline=self.engine_deadline,
            cluster=self._cluster_view(),
            parents=self.parents,
            grant_keys=self.grant_keys,
        )

    def _cluster_view(self) -> Any:
        """What the watches know, per review: the DRA caches' view, plus what each pool's nodes
        advertise when Nodes are watched (one lookup per policy and node change, not per review)."""
        base = self.claims.cluster if self.claims is not None else None
        if self.nodes is None:
            return base
        from dataclasses import replace

        from webhook.engine.model.cluster import EMPTY_CLUSTER

        nodes, store = self.nodes, self.store

        def view() -> Any:
            cluster = base() if base is not None else EMPTY_CLUSTER
            pool_mig = nodes.pool_mig(store.policy)
            return cluster if pool_mig is None else replace(cluster, pool_mig=pool_mig)

        return view

    def start(self) -> None:
        """Per worker, after fork: catch up with policy changes since the master loaded it, then poll."""
        self.store.publish()  # gauges set in the master do not survive fork in multiprocess mode
        metrics.publish_static()
        self.store.check()
        metrics.NAMESPACE_SYNCED.set(1 if self.namespaces.ready else 0)
        self._tickers = [Ticker("policy-reload", self.policy_interval, self.store.check)]
        metrics.TALLY.defer()  # request metrics in batches from here on (see RequestTally)
        self._tickers.append(Ticker("metrics-publish", metrics.TALLY.PUBLISH_INTERVAL, metrics.TALLY.publish))
        if self.tls is not None:
            self._tickers.append(Ticker("cert-reload", self.tls.interval, self.tls.refresh))
        for ticker in self._tickers:
            ticker.start()
        self.namespaces.start()
        if self.claims is not None:
            self.claims.start()
        if self.nodes is not None:
            self.nodes.start()
            nodes, store = self.nodes, self.store
            ticker = Ticker("node-geometry", self.geometry_interval, lambda: nodes.publish(store.policy))
            self._tickers.append(ticker)
            ticker.start()

    def stop(self) -> None:
        for ticker in self._tickers:
            ticker.stop()
        self.namespaces.stop()
        if self.claims is not None:
            self.claims.stop()
        if self.nodes is not None:
            self.nodes.stop()
        metrics.TALLY.defer(False)  # writes what is queued: a worker that exits normally loses nothing

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Ready = a policy is serving (always, after start), the certificate is valid and the namespace
        cache has synced. A broken policy *file* does not make the pod unready: the last good policy
        keeps serving, and pulling every replica out of the Service over a ConfigMap typo would turn
        a bad edit into an outage (it shows in the log and in ``gpu_admission_policy_reload_error``).

        The answer says ready or not and, when not, why, in words; nothing else. Anyone who can reach
        the port can read it, and the policy's directory, digest or ``settings.failure`` would tell an
        attacker how the webhook fails. The detail is in :meth:`status`, for logs."""
        reasons: list[str] = []
        if self.tls is not None:
            tls = self.tls.status()
            if tls["status"] != "ok":
                reasons.append(
                    "no serving certificate loaded" if tls.get("not_after") is None else "serving certificate expired"
                )
        if not self.namespaces.ready:
            reasons.append("namespace labels not synced yet")
        if self.claims is not None and not self.claims.ready:
            reasons.append("DRA claim templates and device classes not synced yet")
        ready = not reasons
        if tuple(reasons) != self._said:  # a change (and the first answer) goes to the log with the detail
            self._said = tuple(reasons)
            log = server_log.info if ready else server_log.warning
            log("ready" if ready else "not ready: " + "; ".join(reasons), extra={"fields": self.status()})
        return ready, ({"ready": True} if ready else {"ready": False, "reasons": reasons})

    def status(self) -> dict[str, Any]:
        """Everything readiness is made of, for the log (policy, certificate, namespace source)."""
        tls = self.tls.status() if self.tls is not None else {"status": "not-configured"}
        out = {"pid": os.getpid(), "policy": self.store.status(), "tls": tls, "namespaces": self.namespaces.status()}
        if self.nodes is not None:  # optional knowledge: never a readiness condition (RBAC may forbid it)
            out["nodes"] = self.nodes.status()
        return out
