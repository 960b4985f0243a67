"""The audit's fixtures: a fake apiserver serving the test cluster, and the CLI run in-process."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.audit.cluster import cluster_objects
from tests.audit.fake_apiserver import FakeAPIServer
from tests.conftest import POLICIES
from webhook.cli import main


@dataclass
class Ran:
    code: int
    out: str
    err: str


def run_cli(*args: str | Path) -> Ran:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["audit", *map(str, args)])
    return Ran(code, out.getvalue(), err.getvalue())


@pytest.fixture
def apiserver(policy) -> Iterator[FakeAPIServer]:
    api = FakeAPIServer().start()
    for obj in cluster_objects(policy):
        api.add(obj)
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def kubeconfig(apiserver: FakeAPIServer, tmp_path: Path) -> Path:
    return apiserver.kubeconfig(tmp_path)


@pytest.fixture
def snapshot(policy, tmp_path: Path) -> Path:
    """The same cluster as `kubectl get … -A -o yaml` prints it: one List."""
    path = tmp_path / "snapshot.yaml"
    doc = {"apiVersion": "v1", "items": cluster_objects(policy), "kind": "List", "metadata": {"resourceVersion": ""}}
    path.write_text(yaml.safe_dump(doc, sort_keys=True))
    return path


__all__ = ["POLICIES", "Ran", "run_cli"]
