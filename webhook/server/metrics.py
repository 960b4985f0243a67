"""Prometheus metrics: defined once here, written by the workers, exposed by the gunicorn master.

Under gunicorn every worker is its own process, so prometheus_client runs in multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``, set by ``serve`` *before* this module is imported) and the master
serves the aggregate on a separate plain-HTTP port: admission stays TLS-only, scrapes never compete
with admission threads, and a worker restart does not reset totals (reference B3).

Label values are bounded on purpose: ``kind`` is one of the kinds the engine knows or ``other``
(a client cannot mint series by sending odd kinds), ``rule`` is a rule id from the registry.
"""

from __future__ import annotations

import contextlib
import os
import threading
from bisect import bisect_left
from collections import deque
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from webhook.engine.model.workload import classify
from webhook.policy.kinds import builtin_table

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# sub-millisecond buckets: the engine decides in ~0.1 ms, so the default buckets (5 ms and up) would
# put every request in the first one and hide regressions
LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.00075,
    0.001,
    0.0015,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)

REQUESTS = Counter(
    "gpu_admission_requests_total",
    "Admission reviews answered, by endpoint (mutate|validate), decision and object kind.",
    ["endpoint", "decision", "kind", "dry_run"],
)
LATENCY = Histogram(
    "gpu_admission_request_duration_seconds",
    "Time from request dispatch to response body, per admission endpoint (parse + engine + encode).",
    ["endpoint"],
    buckets=LATENCY_BUCKETS,
)
VIOLATIONS = Counter(
    "gpu_admission_rule_violations_total",
    "Rule violations found by /validate (not dry runs), by rule id, effective action and kind.",
    ["rule", "action", "kind"],
)
WOULD_DENY = Counter(
    "gpu_admission_would_deny_total",
    "Findings /validate admitted (not dry runs) only because the policy's settings.enforcement is warn or audit: "
    "what enforce would deny, by rule id, enforcement mode and kind.",
    ["rule", "enforcement", "kind"],
)
EXCEPTION_USES = Counter(
    "gpu_admission_exception_uses_total",
    "Findings a policy exception turned into audit entries at /validate (not dry runs), by exception, rule, kind.",
    ["exception", "rule", "kind"],
)
BAD_REQUESTS = Counter(
    "gpu_admission_bad_requests_total",
    "Requests answered with a 4xx (malformed AdmissionReview, wrong content type, too large, ...).",
    ["endpoint", "code"],
)
ENGINE_ERRORS = Counter(
    "gpu_admission_engine_errors_total",
    "Engine exceptions turned into an admission by the policy's settings.failure (allow|deny), or admitted on the "
    "record (allow) under an observe enforcement mode (warn|audit).",
    ["endpoint", "failure"],
)
POLICY_RELOADS = Counter(
    "gpu_admission_policy_reloads_total",
    "Policy reload attempts after the files changed, per worker process, by result (success|failure).",
    ["result"],
)
POLICY_ERROR = Gauge(
    "gpu_admission_policy_reload_error",
    "1 while the policy files on disk do not load and the last good policy keeps serving.",
    multiprocess_mode="livemax",
)
POLICY_LOADED = Gauge(
    "gpu_admission_policy_loaded_timestamp_seconds",
    "Unix time the serving policy was loaded.",
    multiprocess_mode="livemax",
)
EXCEPTION_EXPIRY = Gauge(
    "gpu_admission_exception_expiry_timestamp_seconds",
    "Start (00:00 UTC, Unix time) of the day each policy exception of the serving policy stops applying; "
    "0 for one a reload removed.",
    ["exception", "owner"],
    multiprocess_mode="livemax",
)
CERT_EXPIRY = Gauge(
    "gpu_admission_cert_expiry_timestamp_seconds",
    "notAfter of the serving certificate (Unix time); the soonest one any live worker serves.",
    multiprocess_mode="livemin",
)
CERT_RELOADS = Counter(
    "gpu_admission_cert_reloads_total",
    "TLS context (re)loads after the cert/key/client-CA contents changed, by result (success|failure).",
    ["result"],
)
NAMESPACE_SYNCED = Gauge(
    "gpu_admission_namespace_cache_synced",
    "1 when every live worker's namespace cache has completed its first list (cluster mode).",
    multiprocess_mode="livemin",
)
NAMESPACE_EVENTS = Counter(
    "gpu_admission_namespace_watch_events_total",
    "Namespace watch events applied to the cache, by type.",
    ["type"],
)
NAMESPACE_RELISTS = Counter(
    "gpu_admission_namespace_relists_total",
    "Full namespace lists, by reason (initial|gone|error).",
    ["reason"],
)
BUILD_INFO = Gauge(
    "gpu_admission_build_info",
    "Always 1, labelled with the running gpu-admission and Python versions (one series per version in a rollout).",
    ["version", "python"],
    multiprocess_mode="livemax",
)
NAMESPACE_MISSES = Counter(
    "gpu_admission_namespace_cache_misses_total",
    "Reviews whose namespace was not (yet) in the cache; looked up with a GET (cluster mode).",
)
NAMESPACE_LOOKUPS = Counter(
    "gpu_admission_namespace_lookups_total",
    "Lookups of namespaces the cache did not know, by result (found|not-found|error|skipped: no GET, "
    "a recent 404 or the lookup caps); all but found deny the namespace's GPU objects (class-not-allowed, retry).",
    ["result"],
)

POOL_GEOMETRY_MISMATCH = Gauge(
    "gpu_admission_pool_mig_nodes_disagreeing",
    "Nodes of a MIG pool whose allocatable nvidia.com/mig-* or nvidia.com/mig.config label disagree with "
    "the pool's stated geometry (node watch; 0 when they agree). Pods sized by the policy stay Pending there.",
    ["pool"],
    multiprocess_mode="livemax",
)


def publish_static() -> None:
    """Series that exist from a worker's start, before any review: ``build_info``, and zeroes for the
    counters of rare events (engine errors, policy reloads) so that ``increase()`` and the dashboard
    see a 0, not an absent series, on a healthy server."""
    import platform

    from webhook import __version__

    BUILD_INFO.labels(__version__, platform.python_version()).set(1)
    for endpoint in ("mutate", "validate"):
        for failure in ("allow", "deny"):
            ENGINE_ERRORS.labels(endpoint, failure)
    for result in ("success", "failure"):
        POLICY_RELOADS.labels(result)
    for result in ("found", "not-found", "error", "skipped"):
        NAMESPACE_LOOKUPS.labels(result)


class RequestTally:
    """The two metrics every review writes (``requests_total`` and the latency histogram), counted in
    memory and written to prometheus_client in batches.

    In multiprocess mode each write to a metric is a locked write into the worker's value file, with
    a process-id check; three of them per review (the counter, a histogram bucket and its sum) cost
    about as much as parsing the review. A server worker therefore only appends the review's labels
    and latency to a queue (``deque.append`` is atomic, so no increment can be lost between
    threads), and :meth:`publish` adds the queued reviews up and writes each label set's counter
    once and each histogram bucket once. ``Runtime`` publishes every ``PUBLISH_INTERVAL`` seconds
    and when the worker exits; a scrape can lag by that much, and a worker killed with SIGKILL
    loses at most that much of its counts (like the last lines of its decision log).

    Until :meth:`defer` is called (tests, embedding, the app without a worker runtime) every review
    is written at once, exactly as ``observe`` and ``inc`` would.
    """

    PUBLISH_INTERVAL = 1.0

    def __init__(self) -> None:
        self._queue: deque[tuple[str, str, str, str, float]] = deque()
        self._deferred = False
        self._publishing = threading.Lock()
        self._counters: dict[tuple[str, str, str, str], Any] = {}
        self._histograms: dict[str, Any] = {}

    def defer(self, on: bool = True) -> None:
        self._deferred = on
        if not on:
            self.publish()

    def record(self, endpoint: str, outcome: str, kind: str, dry_run: bool, seconds: float) -> None:
        self._queue.append((endpoint, outcome, kind, "true" if dry_run else "false", seconds))
        if not self._deferred:
            self.publish()

    def publish(self) -> None:
        """Write everything queued so far; safe to call from any thread."""
        with self._publishing:
            counts: dict[tuple[str, str, str, str], int] = {}
            latencies: dict[str, tuple[list[int], list[float]]] = {}
            bounds = _LATENCY_BOUNDS
            pop = self._queue.popleft
            while True:
                try:
                    endpoint, outcome, kind, dry_run, seconds = pop()
                except IndexError:
                    break
                key = (endpoint, outcome, kind, dry_run)
                counts[key] = counts.get(key, 0) + 1
                entry = latencies.get(endpoint)
                if entry is None:
                    entry = latencies[endpoint] = ([0] * (len(bounds) + 1), [0.0])
                entry[0][bisect_left(bounds, seconds)] += 1  # the first bucket whose bound >= seconds
                entry[1][0] += seconds
            for key, n in counts.items():
                child = self._counters.get(key)
                if child is None:
                    child = self._counters[key] = REQUESTS.labels(*key)
                child.inc(n)
            for endpoint, (buckets, total) in latencies.items():
                child = self._histograms.get(endpoint)
                if child is None:
                    child = self._histograms[endpoint] = LATENCY.labels(endpoint)
                # what observe() does per value, done once per bucket: prometheus_client keeps a
                # value per bucket (``_buckets``, cumulated on collection) and one for the sum
                child._sum.inc(total[0])
                for i, n in enumerate(buckets):
                    if n:
                        child._buckets[i].inc(n)


_LATENCY_BOUNDS = tuple(LATENCY_BUCKETS)
TALLY = RequestTally()


def observe_request(endpoint: str, outcome: str, kind: str, dry_run: bool, seconds: float) -> None:
    """Count one answered review and its latency (see :class:`RequestTally`)."""
    TALLY.record(endpoint, outcome, kind, dry_run, seconds)


def kind_label(obj: Any) -> str:
    """A bounded ``kind`` label: the engine's kind name (``VolcanoJob`` for Volcano) or ``other``."""
    if type(obj) is dict:  # what the review parser gives: one lookup, no enum
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if type(api_version) is str and type(kind) is str:
            return _KIND_LABELS.get((api_version, kind), "other")
        return "other"
    workload = classify(obj)
    return workload.name if workload is not None else "other"


_KIND_LABELS = {key: workload.name for key, workload in builtin_table().items()}
"""Built-in kinds only: a policy's own kinds count as ``other``, so the label set stays fixed."""


def exposition_registry() -> CollectorRegistry:
    """The registry the master serves: the multiprocess aggregate, or this process's own metrics."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    from prometheus_client import REGISTRY

    return REGISTRY


def serve_metrics(host: str, port: int) -> Any:
    """Start the plain-HTTP ``/metrics`` endpoint in a daemon thread of the calling (master) process."""
    from prometheus_client import start_http_server

    return start_http_server(port, addr=host, registry=exposition_registry())


def wipe_multiproc_dir() -> None:
    """Remove a previous run's value files, which would otherwise be summed into this run's totals."""
    directory = os.environ.get(MULTIPROC_ENV)
    if not directory or not os.path.isdir(directory):
        return
    for name in os.listdir(directory):
        if name.endswith(".db"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(directory, name))


def mark_worker_dead(pid: int) -> None:
    """Drop a dead worker's live gauges (its counters stay, so totals remain monotonic)."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
