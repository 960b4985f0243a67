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
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from webhook.engine.workload import classify

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
BAD_REQUESTS = Counter(
    "gpu_admission_bad_requests_total",
    "Requests answered with a 4xx (malformed AdmissionReview, wrong content type, too large, ...).",
    ["endpoint", "code"],
)
ENGINE_ERRORS = Counter(
    "gpu_admission_engine_errors_total",
    "Engine exceptions turned into an admission by the policy's settings.failure (allow|deny).",
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
NAMESPACE_MISSES = Counter(
    "gpu_admission_namespace_cache_misses_total",
    "Reviews whose namespace was not (yet) in the cache; evaluated with the name label only.",
)


_REQUEST_CHILDREN: dict[tuple[str, str, str, str], Any] = {}
_LATENCY_CHILDREN: dict[str, Any] = {}


def observe_request(endpoint: str, outcome: str, kind: str, dry_run: bool, seconds: float) -> None:
    """Count one answered review and its latency: the two metric writes every request makes.

    ``labels()`` validates and locks on every call; the children are looked up once per label set
    and kept (the label values are bounded, see the module docstring, so the dicts are too). A
    cached child stays valid for the process: prometheus_client never replaces a child."""
    key = (endpoint, outcome, kind, "true" if dry_run else "false")
    counter = _REQUEST_CHILDREN.get(key)
    if counter is None:
        counter = _REQUEST_CHILDREN[key] = REQUESTS.labels(*key)
    latency = _LATENCY_CHILDREN.get(endpoint)
    if latency is None:
        latency = _LATENCY_CHILDREN[endpoint] = LATENCY.labels(endpoint)
    latency.observe(seconds)
    counter.inc()


def kind_label(obj: Any) -> str:
    """A bounded ``kind`` label: the engine's kind name (``VolcanoJob`` for Volcano) or ``other``."""
    kind = classify(obj)
    return kind.value if kind is not None else "other"


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
