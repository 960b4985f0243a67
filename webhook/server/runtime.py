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

from webhook.server import metrics
from webhook.server.admission import Admitter
from webhook.server.namespaces import NamespaceSource, OfflineNamespaces
from webhook.server.reload import PolicyStore, Ticker
from webhook.server.tls import CertReloader


@dataclass
class Runtime:
    store: PolicyStore
    namespaces: NamespaceSource = field(default_factory=OfflineNamespaces)
    tls: CertReloader | None = None
    policy_interval: float = 2.0
    admitter: Admitter = field(init=False)
    _tickers: list[Ticker] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.admitter = Admitter(self.store, self.namespaces)

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

    def stop(self) -> None:
        for ticker in self._tickers:
            ticker.stop()
        self.namespaces.stop()
        metrics.TALLY.defer(False)  # writes what is queued: a worker that exits normally loses nothing

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Ready = a policy is serving (always, after start), the certificate is valid and the namespace
        cache has synced. A broken policy *file* does not make the pod unready: the last good policy
        keeps serving, and pulling every replica out of the Service over a ConfigMap typo would turn
        a bad edit into an outage. It shows as ``policy.status: stale`` with the errors."""
        tls = self.tls.status() if self.tls is not None else {"status": "not-configured"}
        namespaces = self.namespaces.status()
        ready = tls["status"] in ("ok", "not-configured") and self.namespaces.ready
        return ready, {
            "ready": ready,
            "pid": os.getpid(),
            "policy": self.store.status(),
            "tls": tls,
            "namespaces": namespaces,
        }
