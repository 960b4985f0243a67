"""Fixtures for the reliability and security suite: the server suite's certificates and namespaces
file (same session fixtures, imported so that pytest registers them here too).

Every test here starts the real server (``tests.server.support.ServerProcess``) and is marked
``reliability`` (``pytest -m reliability``); the TLS/mTLS/log-leak checks are also marked ``security``.
"""

from __future__ import annotations

from tests.server.conftest import _no_multiprocess_metrics_in_pytest, namespaces_file, server_certs

__all__ = ["_no_multiprocess_metrics_in_pytest", "namespaces_file", "server_certs"]
