"""Fixtures for the server suite: serving certificates from ``webhook.certs.generate`` and the
namespaces file. Servers are started per module (see each module's ``server`` fixture)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.server.objects import NAMESPACES_YAML


@pytest.fixture(scope="session")
def server_certs(tmp_path_factory: pytest.TempPathFactory):
    """A CA and a serving pair for gpu-admission.gpu-admission.svc (+ localhost, 127.0.0.1)."""
    from webhook.certs.generate import generate

    return generate(
        tmp_path_factory.mktemp("certs"), "gpu-admission", "gpu-admission", dns=("localhost",), ips=("127.0.0.1",)
    )


@pytest.fixture(scope="session")
def namespaces_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ns") / "namespaces.yaml"
    path.write_text(NAMESPACES_YAML)
    return path


@pytest.fixture(autouse=True, scope="session")
def _no_multiprocess_metrics_in_pytest():
    """In-process tests read the default registry; a stray multiprocess dir would redirect writes."""
    assert not os.environ.get("PROMETHEUS_MULTIPROC_DIR"), "unset PROMETHEUS_MULTIPROC_DIR to run these tests"
    yield
