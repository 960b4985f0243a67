"""The Helm chart installed, upgraded and removed with real Helm 4 on a real control plane of its own.

A plane separate from the kustomize install (the chart's object names are fixed: one release per
cluster). The chart is installed as its docs say for a webhook reached by URL: the policy bundle
rendered from the product's shipped default (``policy render --helm-values``), ``clientConfig.mode:
url`` pointing at a loopback port, the chart's own self-signed TLS with the loopback IP SAN. The real
``gpu-admission serve`` then runs on that port with the certificate from the chart's Secret and a
token of the chart's ServiceAccount, so the chart's RBAC and certificates are what it runs with.

- after ``helm install`` the webhook mutates and denies as the kustomize install does;
- ``helm upgrade`` with a policy change and a replica change keeps the TLS Secret (``lookup``) and the
  webhook answering, and applies the change;
- ``helm uninstall`` leaves nothing of ours behind.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import DEFAULT_POLICY_DIR, ROOT
from tests.e2e import install
from tests.e2e.conftest import probe_installed
from tests.e2e.plane import build, controlplane
from tests.e2e.plane.controlplane import Plane, free_port

CHART = ROOT / "charts" / "gpu-admission"
NAMESPACE = "gpu-admission"
RELEASE = "gpu-admission"


@pytest.fixture(scope="module")
def helm_binary(plane: Plane) -> Path:  # the session plane's fixture decides whether the tier runs at all
    from tests.helm.conftest import build_helm

    return build_helm()


@pytest.fixture(scope="module")
def helm_plane(plane: Plane) -> Iterator[Plane]:
    directory = Path(tempfile.mkdtemp(prefix="gpu-admission-helm-plane-"))
    p = controlplane.start(directory, build.build())
    try:
        yield p
    finally:
        p.stop()


def helm(binary: Path, plane: Plane, *args: str) -> subprocess.CompletedProcess[str]:
    home = Path(tempfile.mkdtemp(prefix="helm-home-"))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "HELM_CACHE_HOME": str(home / "c"),
           "HELM_CONFIG_HOME": str(home / "f"), "HELM_DATA_HOME": str(home / "d"),
           "KUBECONFIG": str(plane.admin_kubeconfig)}  # fmt: skip
    try:
        return subprocess.run([str(binary), *args], capture_output=True, text=True, env=env, timeout=300, check=False)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def bundle_values(policy_dir: Path, out: Path) -> Path:
    proc = subprocess.run([sys.executable, "-m", "webhook", "policy", "render", "--helm-values", str(policy_dir)],
                          capture_output=True, text=True, cwd=ROOT, check=True)  # fmt: skip
    out.write_text(proc.stdout)
    return out


def release_values(port: int) -> dict[str, Any]:
    return {
        "webhook": {"clientConfig": {"mode": "url", "url": f"https://127.0.0.1:{port}"}},
        "tls": {"mode": "selfSigned", "selfSigned": {"ipAddresses": ["127.0.0.1"]}},
    }


class Release:
    def __init__(self, binary: Path, plane: Plane, workdir: Path) -> None:
        self.binary, self.plane, self.workdir = binary, plane, workdir
        self.port = free_port()
        self.server: install.Server | None = None

    def run(self, verb: str, policy_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        values = self.workdir / f"release-{verb}.yaml"
        values.write_text(json.dumps(release_values(self.port)))
        bundle = bundle_values(policy_dir, self.workdir / f"bundle-{verb}.yaml")
        return helm(self.binary, self.plane, verb, RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(bundle),
                    "-f", str(values), *extra)  # fmt: skip

    def tls_secret(self) -> dict[str, str]:
        secret = install.get(self.plane, "secret", "gpu-admission-tls", NAMESPACE)
        return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}

    def serve(self) -> install.Server:
        """The real server on the URL the chart configured, with the chart's certificate and ServiceAccount."""
        if self.server is not None:
            self.server.stop()
        certs = self.workdir / "certs"
        certs.mkdir(exist_ok=True)
        tls = self.tls_secret()
        (certs / "tls.crt").write_text(tls["tls.crt"])
        (certs / "tls.key").write_text(tls["tls.key"])
        (certs / "ca.crt").write_text(tls.get("ca.crt", tls["tls.crt"]))
        self.server = install.start_server(self.plane, DEFAULT_POLICY_DIR, self.workdir, port=self.port)
        return self.server


@pytest.fixture(scope="module")
def release(helm_binary: Path, helm_plane: Plane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    plane = helm_plane
    install.apply(plane, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}])
    r = Release(helm_binary, plane, tmp_path_factory.mktemp("helm"))
    try:
        yield r
    finally:
        if r.server is not None:
            r.server.stop()


def ours(plane: Plane) -> list[str]:
    """Every object labelled as ours, cluster-scoped and in our namespace."""
    kinds = ("mutatingwebhookconfigurations,validatingwebhookconfigurations,validatingadmissionpolicies,"
             "validatingadmissionpolicybindings,mutatingadmissionpolicies,mutatingadmissionpolicybindings,"
             "priorityclasses,clusterroles,clusterrolebindings")  # fmt: skip
    names = plane.kubectl("get", kinds, "-l", "app.kubernetes.io/name=gpu-admission", "-o", "name").stdout.split()
    names += plane.kubectl("get", "all,configmaps,secrets,serviceaccounts,roles,rolebindings,networkpolicies,"
                           "poddisruptionbudgets,resourcequotas", "-n", NAMESPACE, "-l",
                           "app.kubernetes.io/name=gpu-admission", "-o", "name").stdout.split()  # fmt: skip
    return sorted(names)


def test_install_upgrade_uninstall(release: Release) -> None:
    plane = release.plane
    proc = release.run("install", DEFAULT_POLICY_DIR)
    assert proc.returncode == 0, proc.stderr
    assert ours(plane), "helm install created nothing labelled as ours"
    release.serve()
    install.wait_for(lambda: probe_installed(plane), "the chart's webhooks to mutate and deny")
    tls_before = release.tls_secret()

    # upgrade: a policy change (a new PriorityClass) and a replica change; the certificates stay
    changed = release.workdir / "policy"
    shutil.copytree(DEFAULT_POLICY_DIR, changed)
    doc = yaml.safe_load((changed / "default.yaml").read_text())
    doc["spec"]["priorityClasses"]["gpu-e2e-upgrade"] = {"value": 7, "description": "added by the upgrade test"}
    (changed / "default.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = release.run("upgrade", changed, "--set", "webhook.replicas=5")
    assert proc.returncode == 0, proc.stderr
    assert release.tls_secret() == tls_before, "helm upgrade regenerated the certificates"
    assert install.get(plane, "priorityclass", "gpu-e2e-upgrade")["value"] == 7
    assert install.get(plane, "deployment", "gpu-admission", NAMESPACE)["spec"]["replicas"] == 5
    assert probe_installed(plane), "the webhook stopped answering after the upgrade"

    proc = helm(release.binary, plane, "uninstall", RELEASE, "-n", NAMESPACE)
    assert proc.returncode == 0, proc.stderr
    install.wait_for(lambda: not ours(plane), "helm uninstall to remove everything of ours")
