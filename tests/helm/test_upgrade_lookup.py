"""What the chart reads from the cluster at install and upgrade (``lookup``), under the real Helm 4 against
a read-only API stand-in: self-signed certificates survive an upgrade, the serving certificate is re-issued
under the same CA near its expiry, and an existing policy ConfigMap holding another policy is refused.
"""

from __future__ import annotations

import base64
import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from tests.helm.conftest import NAMESPACE, Helm
from tests.helm.lookup_apiserver import serving


def _server_template(helm: Helm, tmp_path: Path, cluster: list[dict[str, Any]], values: dict[str, Any] | None = None):
    """``helm template --dry-run=server`` (what ``helm upgrade`` renders) against ``cluster``."""
    kinds = {(d["apiVersion"], d["kind"]) for d in helm.template(values)}
    args = ["template", "gpu-admission", str(helm.chart), "--namespace", NAMESPACE, "--dry-run=server",
            "--disable-openapi-validation"]  # fmt: skip
    if values:
        path = tmp_path / "values.yaml"
        path.write_text(json.dumps(values), encoding="utf-8")
        args += ["-f", str(path)]
    with serving(cluster, kinds, tmp_path) as kubeconfig:
        return helm.run(*args, "--kubeconfig", str(kubeconfig))


def _installed(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as the release stored it: Helm's ownership annotations (an upgrade refuses objects without)."""
    doc = copy.deepcopy(doc)
    doc["metadata"].setdefault("annotations", {}).update(
        {"meta.helm.sh/release-name": "gpu-admission", "meta.helm.sh/release-namespace": NAMESPACE}
    )
    return doc


def _render(helm: Helm, tmp_path: Path, cluster: list[dict[str, Any]]) -> list[dict[str, Any]]:
    proc = _server_template(helm, tmp_path, [_installed(d) for d in cluster])
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _secrets(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}


def _ca_bundles(docs: list[dict[str, Any]]) -> set[str]:
    return {
        w["clientConfig"]["caBundle"] for d in docs if d["kind"].endswith("WebhookConfiguration") for w in d["webhooks"]
    }


def _cert(b64: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(base64.b64decode(b64))


def test_self_signed_certificates_survive_an_upgrade(helm: Helm, tmp_path):
    first = _secrets(_render(helm, tmp_path, []))
    upgraded = _render(helm, tmp_path, list(first.values()))
    assert _secrets(upgraded)["gpu-admission-ca"]["data"] == first["gpu-admission-ca"]["data"]
    assert _secrets(upgraded)["gpu-admission-tls"] == first["gpu-admission-tls"]
    assert _ca_bundles(upgraded) == {first["gpu-admission-ca"]["data"]["ca.crt"]}


def test_a_serving_certificate_near_expiry_is_re_issued_under_the_same_ca(helm: Helm, tmp_path):
    first = _secrets(_render(helm, tmp_path, []))
    expiring = copy.deepcopy(first["gpu-admission-tls"])
    expiring["metadata"]["annotations"]["gpu-admission.io/not-after"] = str(int(time.time()) + 10 * 86400)
    upgraded = _render(helm, tmp_path, [first["gpu-admission-ca"], expiring])
    tls = _secrets(upgraded)["gpu-admission-tls"]
    ca_b64 = first["gpu-admission-ca"]["data"]["ca.crt"]
    assert tls["data"]["tls.crt"] != expiring["data"]["tls.crt"]
    assert tls["data"]["ca.crt"] == ca_b64 and _ca_bundles(upgraded) == {ca_b64}
    _cert(tls["data"]["tls.crt"]).verify_directly_issued_by(_cert(ca_b64))
    assert int(tls["metadata"]["annotations"]["gpu-admission.io/not-after"]) > time.time() + 700 * 86400


def test_a_lost_ca_gives_a_new_ca_and_a_serving_certificate_it_signed(helm: Helm, tmp_path):
    """Never a serving certificate from one CA next to a caBundle of another (the API server would refuse it)."""
    first = _secrets(_render(helm, tmp_path, []))
    upgraded = _render(helm, tmp_path, [first["gpu-admission-tls"]])
    secrets = _secrets(upgraded)
    ca_b64 = secrets["gpu-admission-ca"]["data"]["ca.crt"]
    assert ca_b64 != first["gpu-admission-ca"]["data"]["ca.crt"]
    assert _ca_bundles(upgraded) == {ca_b64} == {secrets["gpu-admission-tls"]["data"]["ca.crt"]}
    _cert(secrets["gpu-admission-tls"]["data"]["tls.crt"]).verify_directly_issued_by(_cert(ca_b64))


@pytest.mark.parametrize("same_policy", [True, False])
def test_an_existing_policy_configmap_must_hold_the_bundles_policy(helm: Helm, tmp_path, same_policy):
    bundle = json.loads((helm.chart / "files" / "policy-bundle.json").read_text(encoding="utf-8"))
    data = dict(bundle["files"])
    if not same_policy:
        name = sorted(data)[0]
        data[name] = data[name].replace("nvidia.com/gpu", "example.com/gpu", 1)
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "data": data,
                 "metadata": {"name": "platform-gpu-policy", "namespace": NAMESPACE}}  # fmt: skip
    proc = _server_template(helm, tmp_path, [configmap], {"policy": {"existingConfigMap": "platform-gpu-policy"}})
    if same_policy:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode != 0
        assert "holds another policy than the bundle's objects were rendered from" in proc.stderr, proc.stderr
