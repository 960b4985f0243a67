"""Fixtures for the server suite: serving certificates from ``webhook.certs.generate`` and the
namespaces file. Servers are started per module (see each module's ``server`` fixture), except
``default_server``: the shipped policy on 1 worker x 2 threads, shared by the modules that need nothing else."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.objects import NAMESPACES_YAML
from tests.server.support import ApiserverClient, ServerProcess, serve_args


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


@pytest.fixture(scope="session")
def default_server(
    tmp_path_factory: pytest.TempPathFactory, server_certs, namespaces_file: Path
) -> Iterator[ServerProcess]:
    """The shipped policy with the test namespaces: one server for every module that needs no other setting."""
    proc = ServerProcess(
        tmp_path_factory.mktemp("default-server"),
        serve_args(server_certs, "--namespace-labels", str(namespaces_file), "--workers", "1", "--threads", "2"),
        ca_files=[server_certs.ca_cert],
    )
    proc.start()
    yield proc
    assert proc.stop() == 0, proc.output()[-3000:]


@pytest.fixture
def default_client(default_server: ServerProcess) -> Iterator[ApiserverClient]:
    c = default_server.client()
    yield c
    c.close()
