"""Every example, created for real: stored exactly as ``check`` predicts, the same warnings, the same denial.

The README's pod, the workloads under ``examples/`` and the chapter's own manifests (``infer-mig``, and
``train-qwen`` with ``minAvailable`` 8 and 4) go through ``kubectl create`` against the real apiserver
with both webhooks installed, in a fresh namespace. ``check`` judged the same object offline first; the
stored object must equal check's prediction as Kubernetes defaults it (see ``tests/e2e/objects.py``),
kubectl must print exactly check's warnings, and a denial must carry check's message.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.conftest import CRDS, ROOT, SEED
from tests.e2e import install, objects
from tests.e2e.conftest import Product

WORKLOAD_KINDS = {"Pod", "Job", "CronJob", "Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"}


def readme_pod() -> dict[str, Any]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## What users write\n\n```yaml\n(.*?)```", text, re.S)
    assert block, "README's 'What users write' pod is gone"
    return yaml.safe_load(block.group(1))


def example_workloads() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((ROOT / "examples").rglob("*.y*ml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(doc, dict) and doc.get("kind") in WORKLOAD_KINDS and "apiVersion" in doc:
                out.append((f"{path.relative_to(ROOT)}#{i}", doc))
    return out


def chapter(index: int, replace: tuple[str, str] | None = None) -> dict[str, Any]:
    if not SEED.exists():
        pytest.skip(f"{SEED} is not available")
    from tests.engine.test_seed_chapter import chapter_manifests

    text = chapter_manifests()[index]
    if replace:
        text = text.replace(*replace)
    return yaml.safe_load(text)


CASES: list[tuple[str, Any]] = [
    ("README-pod", readme_pod),
    *[(name, (lambda d=doc: d)) for name, doc in example_workloads()],
    ("chapter-infer-mig", lambda: chapter(0)),
    ("chapter-train-qwen-minAvailable-8", lambda: chapter(1, ("minMember: 8", "minAvailable: 8"))),
    ("chapter-train-qwen-minAvailable-4", lambda: chapter(1, ("minMember: 8", "minAvailable: 4"))),
]


@pytest.fixture(scope="module")
def volcano_crd(product: Product) -> None:
    crd = CRDS / "batch.volcano.sh_jobs.yaml"
    if not crd.exists():
        return
    product.plane.kubectl("apply", "--server-side", "-f", str(crd))
    install.wait_for(
        lambda: product.plane.kubectl("get", "jobs.batch.volcano.sh", "-A", check=False).returncode == 0,
        "the Volcano Job CRD to be served",
    )


@pytest.mark.parametrize("make", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_example_is_stored_as_check_predicts(product: Product, volcano_crd: None, make) -> None:
    doc = make()
    if doc["apiVersion"].startswith("batch.volcano.sh") and not (CRDS / "batch.volcano.sh_jobs.yaml").exists():
        pytest.skip(f"{CRDS / 'batch.volcano.sh_jobs.yaml'} is not available (the Volcano Job CRD)")
    plane = product.plane
    ns = install.namespace(plane)
    result = objects.check(doc, ns)
    code, stored, err = objects.create(plane, doc, ns)
    if not result["allowed"]:
        assert code != 0, f"check denies it, the apiserver stored it: {result['violations']}"
        assert objects.denial_message(result) in err, err
        return
    assert code == 0, f"check admits it, the apiserver refused it: {err}"
    assert stored is not None
    expected = objects.defaulted(plane, objects.predicted(doc, result))
    diff = objects.differences(objects.comparable(stored), objects.comparable(expected))
    assert not diff, "stored differs from check's prediction:\n" + "\n".join(diff)
    ours = [w for w in objects.warnings(err) if w.startswith("[")]
    assert ours == result["warnings"]


def test_dry_run_all_is_judged_and_stores_nothing(product: Product) -> None:
    plane = product.plane
    ns = install.namespace(plane)
    pod = readme_pod()
    code, stored, _ = objects.create(plane, pod, ns, dry_run=True)
    assert code == 0 and stored is not None
    assert stored["spec"]["nodeSelector"] == {"workload": "gpu-infer"}  # mutated on the dry run too
    assert plane.kubectl("get", "pod", pod["metadata"]["name"], "-n", ns, check=False).returncode != 0


def test_the_chapter_train_qwen_as_written_is_refused_by_both(product: Product, volcano_crd: None) -> None:
    """``minMember`` is a PodGroup field: kubectl's strict field validation and check's unknown-field agree."""
    if not (CRDS / "batch.volcano.sh_jobs.yaml").exists():
        pytest.skip(f"{CRDS / 'batch.volcano.sh_jobs.yaml'} is not available (the Volcano Job CRD)")
    doc = chapter(1)
    plane = product.plane
    ns = install.namespace(plane)
    result = objects.check(doc, ns)
    assert any(v["rule"] == "unknown-field" and v["path"] == "spec.minMember" for v in result["violations"])
    code, _, err = objects.create(plane, doc, ns)
    assert code != 0 and "minMember" in err
