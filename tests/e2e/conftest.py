"""The end-to-end tier: a real etcd, kube-apiserver 1.36 and kube-scheduler, the product installed on it.

One plane per test session (bringing it up costs seconds; building it, minutes once per machine). Tests
share it and stay out of each other's way by using fresh namespaces; a test that changes what is
installed cluster-wide (the webhook stopped, the in-tree policies added) does it in a module fixture
that restores the installation and waits until the apiserver really serves the restored state.

Where the machine has no Go toolchain the tier skips, saying why; under ``CI=true`` that skip is a
failure, since CI's machines must run it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DEFAULT_POLICY_DIR
from tests.e2e import install
from tests.e2e.plane import build, controlplane
from tests.e2e.plane.controlplane import Plane

POLICY_FILE = DEFAULT_POLICY_DIR / "default.yaml"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the end-to-end tier must run under CI=true, but: {reason}", pytrace=False)
    pytest.skip(f"end-to-end tier skipped: {reason}")


@pytest.fixture(scope="session")
def plane() -> Iterator[Plane]:
    why = None if build.built() else build.go_missing()
    if why:
        _unavailable(why)
    if os.environ.get("GPU_ADMISSION_E2E") == "off":
        _unavailable("GPU_ADMISSION_E2E=off")
    try:
        bin_dir = build.build(log=sys.__stderr__)
    except build.BuildError as exc:
        pytest.fail(str(exc), pytrace=False)
    directory = Path(tempfile.mkdtemp(prefix="gpu-admission-plane-"))
    try:
        p = controlplane.start(directory, bin_dir)
    except controlplane.PlaneError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield p
    finally:
        p.stop()


@dataclass
class Product:
    """The product as installed on the plane: its server, the objects applied, the nodes and their pools."""

    plane: Plane
    server: install.Server
    rendered: list[dict[str, Any]]
    applied: list[dict[str, Any]]
    nodes: dict[str, str | None]
    workdir: Path
    policy_dir: Path  # what the server reads (hot reload): the shipped default, copied

    def restart_server(self) -> install.Server:
        """A new server (new port) and the webhook configurations re-pointed at it."""
        self.server.stop()
        self.server = install.start_server(self.plane, self.policy_dir, self.workdir)
        self.applied = install.install_rendered(self.plane, self.rendered, self.server)
        return self.server


def probe_mutated(plane: Plane) -> bool:
    """A class pod sent with dryRun=All comes back placed: the mutating webhook is in force."""
    ns = "default"
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "probe-", "namespace": ns,
                     "labels": {"gpu-admission.io/workload": "inference"},
                     "annotations": {"gpu-admission.io/gpu-memory": "4Gi"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }  # fmt: skip
    import json

    proc = plane.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod), check=False)
    if proc.returncode != 0:
        return False
    return bool(json.loads(proc.stdout)["spec"].get("nodeSelector"))


def probe_validating(plane: Plane) -> bool:
    """What only the validating webhook refuses (no in-tree policy judges a Deployment's GPU memory) is refused
    by it: an inference Deployment asking more memory than any MIG profile of its pool holds."""
    import json

    pod = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"generateName": "probe-", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "probe"}},
                 "template": {"metadata": {"labels": {"app": "probe", "gpu-admission.io/workload": "inference"},
                                           "annotations": {"gpu-admission.io/gpu-memory": "38Gi"}},
                              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }  # fmt: skip
    proc = plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
    return proc.returncode != 0 and 'admission webhook "validate.gpu-admission.io" denied' in proc.stderr


def probe_installed(plane: Plane) -> bool:
    return probe_mutated(plane) and probe_validating(plane)


@pytest.fixture(scope="session")
def product(plane: Plane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Product]:
    workdir = tmp_path_factory.mktemp("product")
    policy_dir = workdir / "policy"  # the shipped default, copied: a module may add a file and let it reload
    shutil.copytree(DEFAULT_POLICY_DIR, policy_dir)
    install.install_base(plane)
    nodes = install.create_nodes(plane, POLICY_FILE)
    server = install.start_server(plane, policy_dir, workdir)
    rendered = install.render(DEFAULT_POLICY_DIR)
    product = Product(plane, server, rendered, [], nodes, workdir, policy_dir)
    try:
        product.applied = install.install_rendered(plane, rendered, server)
        install.wait_for(lambda: probe_installed(plane), "both webhooks to take effect")
        yield product
    finally:
        product.server.stop()


IN_TREE_ARGS = ("--in-tree", "--kube-version", "1.36")


@pytest.fixture(scope="module")
def in_tree(product: Product) -> Iterator[list[dict[str, Any]]]:
    """The in-tree policies (VAPs and, on 1.36, MAPs) installed for one module, removed after it.

    Applying them at all is a test: the apiserver compiles and type-checks every expression with cel-go
    in its compatibility environment and refuses the object on any error."""
    plane = product.plane
    policies = install.render(DEFAULT_POLICY_DIR, *IN_TREE_ARGS)
    kinds = {d["kind"] for d in policies}
    assert {"ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"} <= kinds, kinds
    install.apply(plane, policies)
    try:
        yield policies
    finally:
        install.delete(plane, policies)
