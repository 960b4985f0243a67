"""gunicorn, run programmatically: the settings that matter for an admission webhook, and the hooks.

Choices (reference B1, B3):

* ``gthread`` workers: keep-alive. The apiserver reuses HTTP/1.1 connections; ``sync`` workers
  close after each response and every review would pay a TLS handshake. Our subclass
  (:mod:`webhook.server.worker`) reads each request in the event loop, under ``request_timeout``,
  so slow clients cannot hold the threads.
* Metrics bind to loopback unless told otherwise: the endpoint is unauthenticated plain HTTP.
* ``preload_app``: the engine and the policy are imported/compiled once in the master and shared
  copy-on-write; per-worker threads (policy/cert tickers, namespace watch) start in
  ``post_worker_init``, after fork.
* TLS only, via the ``ssl_context`` hook (:class:`~webhook.server.tls.CertReloader`); there is no
  plaintext admission listener. Metrics are plain HTTP on a separate port, served by the master.
* ``reuse_port``: each worker listens on its own ``SO_REUSEPORT`` socket, so the kernel balances
  connections across workers; a shared socket let one worker win most accepts and keep those
  connections for good (docs/performance.md). A killed worker's socket leaves the group with it.
* ``control_socket_disable``: the control socket would be created under ``$HOME`` and logs an error
  on a read-only root filesystem. ``worker_tmp_dir=/dev/shm``: heartbeat ``fchmod`` on a disk-backed
  tmp can stall workers.
* Graceful SIGTERM is gunicorn's (27.x gthread): listeners close, in-flight requests finish within
  ``graceful_timeout``, kept-alive connections are closed (a request arriving on one during the
  short linger gets ``Connection: close``), so the apiserver does not keep sending to a terminating
  pod (kubernetes#127335).
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import sys
from typing import Any

from gunicorn.app.base import BaseApplication

from webhook.server import metrics
from webhook.server.app import create_app
from webhook.server.logs import logconfig_dict, server_log
from webhook.server.runtime import Runtime
from webhook.server.settings import ServeSettings, split_hostport
from webhook.server.worker import (
    LIMIT_REQUEST_FIELD_SIZE,
    LIMIT_REQUEST_FIELDS,
    LIMIT_REQUEST_LINE,
    WORKER_CONNECTIONS,
    AdmissionWorker,
)


def gunicorn_options(settings: ServeSettings) -> dict[str, Any]:
    options: dict[str, Any] = {
        "bind": [settings.bind],
        "workers": settings.workers,
        "threads": settings.threads,
        "worker_class": AdmissionWorker,  # gthread, reading requests in its event loop
        "keepalive": settings.keepalive,
        "timeout": settings.timeout,
        "graceful_timeout": settings.graceful_timeout,
        "preload_app": True,
        "control_socket_disable": True,
        "certfile": settings.tls_cert,
        "keyfile": settings.tls_key,
        "accesslog": None,  # the decision log is the access log, without bodies
        "logconfig_dict": logconfig_dict(settings.log_level, settings.bind),
        "loglevel": settings.log_level,
        "proc_name": "gpu-admission",
        # one listening socket per worker (SO_REUSEPORT): the kernel spreads new connections by hash.
        # With one shared socket the workers race for accept() and a burst of connections (the
        # apiserver opening its pool) can all land on one worker, pinned there by keep-alive.
        "reuse_port": True,
        "max_requests": 0,  # recycling leaks prometheus multiprocess files (client_python#275)
        # what an apiserver sends, with room (gunicorn's defaults let a head be ~800 KiB)
        "limit_request_line": LIMIT_REQUEST_LINE,
        "limit_request_fields": LIMIT_REQUEST_FIELDS,
        "limit_request_field_size": LIMIT_REQUEST_FIELD_SIZE,
        "worker_connections": WORKER_CONNECTIONS,
    }
    if settings.client_ca:
        options["ca_certs"] = settings.client_ca
        options["cert_reqs"] = ssl.CERT_REQUIRED
    if os.path.isdir("/dev/shm"):
        options["worker_tmp_dir"] = "/dev/shm"
    return options


def bind_problem(bind: str) -> str | None:
    """Why ``HOST:PORT`` cannot be listened on right now (None if it can)."""
    host, port = split_hostport(bind)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return str(exc)
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn: TIME_WAIT is no conflict
        try:
            probe.bind(address)
        except OSError as exc:
            return str(exc)
    return None


class AdmissionServer(BaseApplication):
    """The gunicorn application: builds the WSGI app once (master) and wires the hooks."""

    def __init__(self, settings: ServeSettings, runtime: Runtime, cleanup_dir: str | None = None):
        self.settings = settings
        self.runtime = runtime
        self.cleanup_dir = cleanup_dir
        super().__init__(prog="gpu-admission serve")

    def load_config(self) -> None:
        for key, value in gunicorn_options(self.settings).items():
            self.cfg.set(key, value)
        if self.runtime.tls is not None:
            self.cfg.set("ssl_context", self.runtime.tls)
        self.cfg.set("when_ready", self.when_ready)
        self.cfg.set("post_worker_init", self.post_worker_init)
        self.cfg.set("worker_exit", self.worker_exit)
        self.cfg.set("child_exit", self.child_exit)
        self.cfg.set("on_exit", self.on_exit)

    def load(self) -> Any:
        return create_app(self.runtime)

    def run(self) -> None:
        """Fail fast when the admission port is taken. With ``reuse_port`` the master binds nothing
        and each worker binds its own socket; a port held by another process would otherwise show
        up only as workers failing to boot, again and again. The probe binds *without*
        SO_REUSEPORT, so it also refuses a port another gpu-admission is serving on (which would
        otherwise silently share the connections)."""
        problem = bind_problem(self.settings.bind)
        if problem:
            print(f"gpu-admission serve: cannot listen on {self.settings.bind}: {problem}", file=sys.stderr)
            raise SystemExit(1)
        # the metrics port the same way: a taken one would otherwise only be an error line after "starting"
        if self.settings.metrics_bind and (problem := bind_problem(self.settings.metrics_bind)):
            print(
                f"gpu-admission serve: cannot listen on {self.settings.metrics_bind} (--metrics-bind): {problem}",
                file=sys.stderr,
            )
            raise SystemExit(1)
        super().run()

    # --- hooks: master ----------------------------------------------------------------------------

    def when_ready(self, server: Any) -> None:
        if self.settings.metrics_bind:
            host, port = split_hostport(self.settings.metrics_bind)
            try:
                metrics.serve_metrics(host, port)
                server_log.info(f"metrics on http://{self.settings.metrics_bind}/metrics")
            except OSError as exc:  # taken since the check in run(): admission matters more, say so loudly
                server_log.error(f"metrics endpoint {self.settings.metrics_bind} not started: {exc}")
        # the master is up; the workers boot next and each says when it serves (post_worker_init)
        server_log.info(
            "gpu-admission starting",
            extra={
                "fields": {
                    "bind": self.settings.bind,
                    "policy": self.runtime.store.policy.digest,
                    "workers": self.settings.workers,
                    "threads": self.settings.threads,
                    "namespaces": self.runtime.namespaces.status().get("mode"),
                    "client_ca": bool(self.settings.client_ca),
                    "request_timeout": self.settings.request_timeout,
                }
            },
        )

    def child_exit(self, server: Any, worker: Any) -> None:
        metrics.mark_worker_dead(worker.pid)

    def on_exit(self, server: Any) -> None:
        if self.cleanup_dir:
            shutil.rmtree(self.cleanup_dir, ignore_errors=True)

    # --- hooks: worker ----------------------------------------------------------------------------

    def post_worker_init(self, worker: Any) -> None:
        if self.runtime.tls is not None:
            from gunicorn import sock

            try:  # load the context now: fail loudly at start, and publish the expiry metric at once
                sock.ssl_context(worker.cfg)
            except (ssl.SSLError, OSError) as exc:
                server_log.error(f"TLS context does not load: {exc}")
        self.runtime.start()
        # the worker's own socket is open (reuse_port) and its threads run: from now on it serves
        server_log.info("gpu-admission ready", extra={"fields": {"bind": f"https://{self.settings.bind}"}})

    def worker_exit(self, server: Any, worker: Any) -> None:
        self.runtime.stop()
