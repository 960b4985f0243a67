"""Every kustomize entry point the docs name, applied with ``kubectl apply -k --dry-run=server``.

The real apiserver validates every object of each build against its own schemas (strict field
validation), runs admission on them, and resolves references to kinds it serves. Kinds of other projects
that an overlay uses (cert-manager's Certificate and Issuer, prometheus-operator's ServiceMonitor and
PrometheusRule) get stand-in CRDs first: served, schemaless, so their objects are accepted as far as
the apiserver can judge them without those projects' schemas; that limit is what this module cannot
check, and the unit tier's schema checks of those objects stand.
"""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from tests.e2e import install
from tests.e2e.conftest import Product

FOREIGN = {
    ("cert-manager.io", "v1"): (
        ("Certificate", "certificates"), ("Issuer", "issuers"), ("ClusterIssuer", "clusterissuers"),
    ),
    ("monitoring.coreos.com", "v1"): (("ServiceMonitor", "servicemonitors"), ("PrometheusRule", "prometheusrules")),
}
NOT_ENTRY_POINTS = {
    "manifests/cluster-scoped": "a transformer package every kustomization lists under `transformers:`",
}
ENTRY_POINTS = sorted(
    str(p.parent.relative_to(ROOT))
    for p in (ROOT / "manifests").rglob("kustomization.yaml")
    if "kind: Component" not in p.read_text() and str(p.parent.relative_to(ROOT)) not in NOT_ENTRY_POINTS
)


def stand_in_crds() -> list[dict]:
    out = []
    for (group, version), kinds in FOREIGN.items():
        for kind, plural in kinds:
            out.append({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{plural}.{group}"},
                "spec": {"group": group, "scope": "Cluster" if kind.startswith("Cluster") else "Namespaced",
                         "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                         "versions": [{"name": version, "served": True, "storage": True,
                                       "schema": {"openAPIV3Schema": {"type": "object",
                                                                      "x-kubernetes-preserve-unknown-fields": True}}}]},
            })  # fmt: skip
    return out


@pytest.fixture(scope="module")
def foreign_crds(product: Product) -> None:
    plane = product.plane
    install.apply(plane, stand_in_crds())
    install.wait_for(lambda: plane.kubectl("get", "certificates.cert-manager.io", "-A", check=False).returncode == 0
                     and plane.kubectl("get", "prometheusrules", "-A", check=False).returncode == 0,
                     "the stand-in CRDs to be served")  # fmt: skip


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_kustomization_applies_on_the_real_apiserver(product: Product, foreign_crds: None, entry: str) -> None:
    proc = product.plane.kubectl("apply", "-k", str(ROOT / entry), "--dry-run=server", check=False, timeout=120)
    assert proc.returncode == 0, f"{entry}: {proc.stderr[-2000:]}"
    assert proc.stdout.strip(), f"{entry}: nothing applied"
