"""Server settings: one frozen value built by ``serve`` from flags, then environment, then defaults.

Environment variables exist because a Deployment sizes a pod with ``env`` (often from the downward
API: ``GPU_ADMISSION_WORKERS`` from the CPU limit) while the command line stays the same image-wide.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV_PREFIX = "GPU_ADMISSION_"


@dataclass(frozen=True)
class ServeSettings:
    policy: str = "policies"
    tls_cert: str | None = None
    tls_key: str | None = None
    client_ca: str | None = None
    client_names: tuple[str, ...] = ("kube-apiserver",)  # with client_ca: accepted CN / DNS SAN names
    bind: str = "127.0.0.1:8443"  # loopback: a laptop's dev server; the Deployment binds the pod IP
    workers: int = 2
    threads: int = 8
    metrics_bind: str | None = "127.0.0.1:9102"  # None: none; the Deployment opts in to the pod IP
    namespaces: str = "auto"  # auto | none | cluster | FILE
    kubeconfig: str | None = None
    certs_dir: str = "certs"
    keepalive: int = 75
    timeout: int = 30
    graceful_timeout: int = 20
    engine_deadline: float = 2.0  # seconds the engine may take per review (the mutating webhook waits 3)
    request_timeout: float = 5.0  # seconds a client has to send a whole request (handshake, headers, body)
    policy_interval: float = 2.0
    cert_interval: float = 2.0
    log_level: str = "info"


def env(name: str, default: str | None = None) -> str | None:
    """``GPU_ADMISSION_<NAME>`` or ``default``; an empty value counts as unset."""
    value = os.environ.get(ENV_PREFIX + name)
    return value if value not in (None, "") else default


def split_hostport(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> (host, port); ValueError on anything else."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)
