"""A list/watch cache of namespace labels, fed by the ``kubernetes`` client, one per worker process.

It follows the apiserver's list/watch contract the way client-go's reflector does:

1. ``GET /api/v1/namespaces`` lists everything and yields ``metadata.resourceVersion``;
2. ``?watch=true&resourceVersion=RV&allowWatchBookmarks=true&timeoutSeconds=T`` streams one JSON event
   per line (ADDED/MODIFIED/DELETED/BOOKMARK); each event's ``resourceVersion`` becomes the new RV;
3. a watch that ends (server timeout, dropped connection, network error) resumes from the last RV,
   *without* re-listing, after a short backoff for errors;
4. ``410 Gone`` (an ERROR event with a ``Status`` of code 410, or an HTTP 410) means the RV was
   compacted away: only then re-list.

Raw JSON instead of the generated models (``_preload_content=False``): models cost ~100x more per
object and only ``metadata.labels`` is needed (kubespawner's reflector does the same). Readers get
labels with one dict lookup and no lock; the list replaces the dict in one assignment.

Started after fork (gunicorn ``post_worker_init``): threads and sockets do not survive ``fork``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from webhook.server import metrics
from webhook.server.logs import server_log

NOT_FOUND = "not found (404)"
NOT_FOUND_ENTRIES = 4096
"""Most 404s remembered per worker (a flood of forged names must not grow it without bound)."""


class _Gone(Exception):
    """The watch's resourceVersion is too old: re-list."""


def api_client_from_config(kubeconfig: str | None = None) -> Any:
    """An ApiClient from the pod's service account, else from a kubeconfig (development)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        if kubeconfig:
            raise config.ConfigException("kubeconfig given")
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    return client.ApiClient(configuration)


def api_from_config(kubeconfig: str | None = None) -> Any:
    """CoreV1Api for the namespace watch."""
    from kubernetes import client

    return client.CoreV1Api(api_client_from_config(kubeconfig))


class _Flight:
    """One GET of a namespace in progress; reviews of the same namespace meanwhile share its answer."""

    __slots__ = ("done", "labels", "reason")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.labels: dict[str, str] | None = None
        self.reason = "the lookup did not finish in time"


class NamespaceWatchCache:
    """Namespace name -> labels, kept current by list + watch; ``ready`` after the first list."""

    speaks_for_cluster = True

    def __init__(
        self,
        api_factory: Callable[[], Any],
        *,
        watch_timeout: int = 300,
        request_timeout: float = 10.0,
        lookup_timeout: float = 0.5,
        max_lookups: int = 2,
        lookup_rate: float = 10.0,
        lookup_burst: int = 10,
        negative_ttl: float = 5.0,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
    ):
        self._api_factory = api_factory
        self.watch_timeout = watch_timeout
        self.request_timeout = request_timeout
        # seconds one GET of a namespace the cache does not know may take (total): with the engine's
        # deadline it stays below the mutating webhook's timeoutSeconds
        self.lookup_timeout = lookup_timeout
        # what forged reviews for random namespaces may cost the apiserver, per worker: GETs at once,
        # GETs per second (a bucket of lookup_burst), and how long a 404 is believed
        self.max_lookups = max_lookups
        self.lookup_rate = lookup_rate
        self.lookup_burst = lookup_burst
        self.negative_ttl = negative_ttl
        self._tokens = float(lookup_burst)
        self._refilled = time.monotonic()
        self._flights: dict[str, _Flight] = {}
        self._not_found: dict[str, float] = {}  # namespace -> until when a 404 is believed (monotonic)
        self._lookup_api: Any = None
        self._lookup_lock = threading.Lock()
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._labels: dict[str, dict[str, str]] = {}
        self.resource_version: str | None = None
        self.last_error: str | None = None
        self.lists = 0
        self.watches = 0
        self._synced = threading.Event()
        self._stopped = threading.Event()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._resp: Any = None

    # --- readers (request threads) ---------------------------------------------------------------

    def labels(self, namespace: str) -> dict[str, str] | None:
        """What the watch has delivered: one dict lookup, no lock, no I/O, no waiting."""
        return self._labels.get(namespace)

    def lookup(self, namespace: str) -> dict[str, str]:
        """Labels for a review: the cache, else one GET of the namespace; raises NamespaceUnknown.

        A namespace the watch has not delivered (created a moment ago, or the watch is behind or
        down) is read from the apiserver directly, within ``lookup_timeout``. The answer is not put
        into the cache: the watch owns it (a GET racing a DELETED event must not bring a namespace
        back), and the window it covers is short. 404, an API error or a timeout leave the namespace
        unknown, and the review is denied rather than judged by the catch-all entitlement.

        What this may cost is bounded, since anyone who can reach the webhook can send reviews for
        namespaces that do not exist: a 404 is believed for ``negative_ttl`` seconds; reviews of a
        namespace being looked up share that GET; at most ``max_lookups`` GETs run at once and
        ``lookup_rate`` per second start (``lookup_burst`` at once). A lookup past those limits is
        not made: the namespace stays unknown (retry). Nothing here sleeps."""
        found = self._labels.get(namespace)
        if found is not None:
            return found
        from webhook.server.namespaces import NamespaceUnknown

        metrics.NAMESPACE_MISSES.inc()
        now = time.monotonic()
        with self._lookup_lock:
            flight = self._flights.get(namespace)
            leader = flight is None
            if leader:
                skipped = self._skip(namespace, now)
                if skipped is not None:
                    metrics.NAMESPACE_LOOKUPS.labels("skipped").inc()
                    raise NamespaceUnknown(namespace, skipped)
                flight = self._flights[namespace] = _Flight()
        assert flight is not None
        if not leader:  # the GET in progress answers this review too, within its own timeout
            flight.done.wait(self.lookup_timeout + 0.1)
            if flight.labels is not None:
                return flight.labels
            raise NamespaceUnknown(namespace, flight.reason)
        try:
            labels = flight.labels = self._get(namespace)  # before ``done`` is set: followers read it
        except Exception as exc:
            reason = flight.reason = _lookup_error(exc)
            not_found = reason == NOT_FOUND
            if not_found:
                with self._lookup_lock:
                    self._remember_not_found(namespace, time.monotonic())
            metrics.NAMESPACE_LOOKUPS.labels("not-found" if not_found else "error").inc()
            server_log.warning(
                "namespace unknown: not in the cache and the lookup failed; its GPU objects are denied",
                extra={"fields": {"namespace": namespace, "error": reason}},
            )
            raise NamespaceUnknown(namespace, reason) from None
        finally:
            with self._lookup_lock:
                self._flights.pop(namespace, None)
            flight.done.set()
        metrics.NAMESPACE_LOOKUPS.labels("found").inc()
        return labels

    def _skip(self, namespace: str, now: float) -> str | None:
        """Why no GET is made for ``namespace`` now (None: make it and take a token). Under the lock."""
        until = self._not_found.get(namespace)
        if until is not None:
            if until > now:
                return f"{NOT_FOUND}, looked up less than {self.negative_ttl:g} s ago"
            del self._not_found[namespace]
        if len(self._flights) >= self.max_lookups:
            return f"not looked up: {self.max_lookups} lookups of other namespaces in progress"
        self._tokens = min(float(self.lookup_burst), self._tokens + (now - self._refilled) * self.lookup_rate)
        self._refilled = now
        if self._tokens < 1.0:
            return f"not looked up: more than {self.lookup_rate:g} lookups per second"
        self._tokens -= 1.0
        return None

    def _remember_not_found(self, namespace: str, now: float) -> None:
        """Under the lock. Bounded: forged names are many, so expired entries go first, then all."""
        if len(self._not_found) >= NOT_FOUND_ENTRIES:
            self._not_found = {ns: until for ns, until in self._not_found.items() if until > now}
            if len(self._not_found) >= NOT_FOUND_ENTRIES:
                self._not_found.clear()
        self._not_found[namespace] = now + self.negative_ttl

    def _get(self, namespace: str) -> dict[str, str]:
        with self._lookup_lock:  # one client per process for lookups; the watch thread keeps its own
            if self._lookup_api is None:
                self._lookup_api = self._api_factory()
            api = self._lookup_api
        resp = api.read_namespace(namespace, _preload_content=False, _request_timeout=self.lookup_timeout)
        try:
            doc = orjson.loads(resp.data)
        finally:
            resp.release_conn()
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        if not isinstance(meta, dict) or meta.get("name") != namespace:
            raise ValueError("the apiserver answered something other than this Namespace")
        labels = meta.get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}

    @property
    def ready(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mode": "cluster",
            "status": "ok" if self.ready else "syncing",
            "synced": self.ready,
            "namespaces": len(self._labels),
            "resource_version": self.resource_version,
        }
        if self.last_error:
            out["last_error"] = self.last_error
        return out

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        metrics.NAMESPACE_SYNCED.set(0)
        self._thread = threading.Thread(target=self._run, name="gpu-admission-namespaces", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        self._stopped.set()
        resp = self._resp
        if resp is not None:  # unblock a read parked on the watch socket (as kubernetes' Watch.stop does)
            sock = getattr(getattr(resp, "connection", None), "sock", None)
            with contextlib.suppress(Exception):
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)
                else:
                    resp.shutdown()
        if self._thread is not None:
            self._thread.join(timeout)

    # --- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        api = None
        reason = "initial"
        backoff = self.backoff_initial
        while not self._stopped.is_set():
            try:
                if api is None:
                    api = self._api_factory()
                if reason:
                    self._list(api, reason)
                    reason = ""
                started = time.monotonic()
                self._watch(api)
                if time.monotonic() - started < 1.0:
                    # a watch the server ends at once (overload, proxy) must not become a busy loop
                    self._stopped.wait(backoff)
                    backoff = min(backoff * 2, self.backoff_max)
                else:
                    backoff = self.backoff_initial
            except _Gone:
                reason = "gone"
                server_log.info("namespace watch expired (410 Gone); re-listing")
            except Exception as exc:
                if self._stopped.is_set():
                    break
                self.last_error = f"{type(exc).__name__}: {exc}"[:300]
                if reason:
                    reason = "initial" if not self._synced.is_set() else "error"
                server_log.warning(
                    "namespace cache: API error; retrying",
                    extra={"fields": {"error": self.last_error, "retry_in_s": round(backoff, 2)}},
                )
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, self.backoff_max)

    def _list(self, api: Any, reason: str) -> None:
        resp = api.list_namespace(_preload_content=False, _request_timeout=self.request_timeout)
        try:
            doc = orjson.loads(resp.data)
        finally:
            resp.release_conn()
        fresh: dict[str, dict[str, str]] = {}
        for item in doc.get("items") or ():
            meta = item.get("metadata") or {}
            if meta.get("name"):
                fresh[meta["name"]] = dict(meta.get("labels") or {})
        with self._changed:
            self._labels = fresh  # one swap: readers see the old or the new map
            self.resource_version = (doc.get("metadata") or {}).get("resourceVersion")
            self._changed.notify_all()
        self.lists += 1
        self.last_error = None
        metrics.NAMESPACE_RELISTS.labels(reason).inc()
        if not self._synced.is_set():
            self._synced.set()
            metrics.NAMESPACE_SYNCED.set(1)
            server_log.info(
                "namespace cache synced",
                extra={"fields": {"namespaces": len(fresh), "resource_version": self.resource_version}},
            )

    def _watch(self, api: Any) -> None:
        from kubernetes.client.exceptions import ApiException

        self.watches += 1
        try:
            resp = api.list_namespace(
                watch=True,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self.watch_timeout,
                _preload_content=False,
                # connect, read: the server closes after timeout_seconds; the slack catches dead peers
                _request_timeout=(self.request_timeout, self.watch_timeout + 30),
            )
        except ApiException as exc:
            if exc.status == 410:
                raise _Gone() from None
            raise
        self._resp = resp
        try:
            if self._stopped.is_set():  # stop() may have looked for _resp just before it was set
                return
            for line in _lines(resp):
                if self._stopped.is_set():
                    return
                self._apply(orjson.loads(line))
        finally:
            self._resp = None
            with contextlib.suppress(Exception):
                resp.release_conn()

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('reason')}: {obj.get('message')}")
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        with self._changed:
            if kind in ("ADDED", "MODIFIED") and name:
                self._labels[name] = dict(meta.get("labels") or {})
            elif kind == "DELETED" and name:
                self._labels.pop(name, None)
            if meta.get("resourceVersion"):
                self.resource_version = meta["resourceVersion"]
            self._changed.notify_all()
        if kind in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
            metrics.NAMESPACE_EVENTS.labels(kind).inc()


def _lookup_error(exc: Exception) -> str:
    """What went wrong with a namespace GET, short and without the response body."""
    status = getattr(exc, "status", None)
    if status == 404:
        return NOT_FOUND
    if isinstance(status, int) and status:
        return f"the apiserver answered {status} {getattr(exc, 'reason', '') or ''}".strip()
    return f"{type(exc).__name__}: {exc}"[:200]


def _lines(resp: Any) -> Iterator[bytes]:
    """Split a streamed watch body into its newline-delimited JSON events as chunks arrive."""
    buffer = b""
    for chunk in resp.stream(amt=None, decode_content=True):
        buffer += chunk
        while True:
            cut = buffer.find(b"\n")
            if cut < 0:
                break
            line, buffer = buffer[:cut], buffer[cut + 1 :]
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer
