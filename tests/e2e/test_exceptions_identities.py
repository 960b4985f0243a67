"""Exceptions judged on the identities the real apiserver sends.

The unit and server tiers write ``request.userInfo`` by hand. Here the apiserver fills it in: users
and groups from client certificates (CN, O) and a ServiceAccount from its TokenRequest token. The
running server's policy gains an exception file (hot reload, as a platform team's ConfigMap update
would): ``privileged-gpu`` may be broken in one namespace by user ``alice``, group ``gpu-diagnostics``
and the ServiceAccount ``deployer``. Everyone else, with the same RBAC, is denied.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import install
from tests.e2e.conftest import Product
from tests.e2e.plane.controlplane import Plane

EXCEPTION_LABEL = "e2e.gpu-admission.io/diag"


def privileged_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "diag-"},
            "spec": {"containers": [{"name": "dcgm", "image": "nvcr.io/nvidia/cloud-native/dcgm:4.1.1",
                                     "securityContext": {"privileged": True},
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}  # fmt: skip


def exception_file(ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "gpu-admission.io/v1", "kind": "GPUPolicy",
        "spec": {"exceptions": [{
            "name": "e2e-dcgm-diag", "rules": ["privileged-gpu"],
            "namespaces": {"matchLabels": {EXCEPTION_LABEL: "yes"}},
            "subjects": [{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "gpu-diagnostics"},
                         {"kind": "ServiceAccount", "namespace": ns, "name": "deployer"}],
            "expires": "2099-12-31", "reason": "DCGM diagnostics need a privileged container",
            "owner": "platform-team",
        }]},
    }  # fmt: skip


def try_create(plane: Plane, ns: str, kubeconfig: Path) -> tuple[bool, str]:
    proc = plane.kubectl("create", "--dry-run=server", "-n", ns, "-f", "-", input=json.dumps(privileged_pod()),
                         kubeconfig=kubeconfig, check=False)  # fmt: skip
    return proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def diag(product: Product) -> Iterator[tuple[Plane, str, dict[str, Path]]]:
    plane = product.plane
    ns = install.namespace(plane, {EXCEPTION_LABEL: "yes"}, prefix="diag")
    install.apply(plane, [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer", "namespace": ns}},
        # a Role of our own: the aggregated ClusterRole `edit` is empty without kube-controller-manager
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "pods", "namespace": ns},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "pods", "namespace": ns},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": n}
                      for n in ("alice", "mallory", "dave")]
         + [{"kind": "ServiceAccount", "name": "deployer", "namespace": ns}]},
    ])  # fmt: skip
    users = {
        "alice": plane.user_kubeconfig("alice", ("tenants",)),
        "mallory": plane.user_kubeconfig("mallory", ("tenants",)),
        "dave": plane.user_kubeconfig("dave", ("gpu-diagnostics",)),
        "deployer": plane.token_kubeconfig(install.sa_token(plane, ns, "deployer"), f"{ns}-deployer"),
    }
    path = product.policy_dir / "e2e-exceptions.yaml"
    path.write_text(yaml.safe_dump(exception_file(ns)))
    try:
        install.wait_for(lambda: try_create(plane, ns, users["alice"])[0], "the server to reload the exception")
        yield plane, ns, users
    finally:
        path.unlink()
        install.wait_for(lambda: not try_create(plane, ns, users["alice"])[0], "the exception to be gone again")


@pytest.mark.parametrize("who", ["alice", "dave", "deployer"])
def test_a_subject_of_the_exception_may_break_the_rule(diag, who: str) -> None:
    plane, ns, users = diag
    ok, err = try_create(plane, ns, users[who])
    assert ok, err


def test_anyone_else_with_the_same_rbac_is_denied(diag) -> None:
    plane, ns, users = diag
    ok, err = try_create(plane, ns, users["mallory"])
    assert not ok and "[privileged-gpu]" in err, err


def test_the_exception_holds_only_in_its_namespaces(product: Product, diag) -> None:
    plane, _, _ = diag
    other = install.namespace(plane, prefix="nodiag")
    ok, err = try_create(plane, other, plane.admin_kubeconfig)
    assert not ok and "[privileged-gpu]" in err, err
